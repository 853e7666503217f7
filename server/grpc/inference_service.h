// strata.v1.Inference (synchronous gRPC service; each Generate runs on its own gRPC thread).
#pragma once

#include "server/grpc/service_state.h"
#include "strata/v1/inference.grpc.pb.h"

namespace strata::rpc {

class InferenceService final : public v1::Inference::Service {
 public:
  explicit InferenceService(ServiceState* state) : state_(*state) {}

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* request,
                          v1::DetokenizeResponse* response) override;

 private:
  ServiceState& state_;
};

}  // namespace strata::rpc
