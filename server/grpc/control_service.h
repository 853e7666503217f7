// strata.v1.Control: Abort, GetModelInfo, GetServerInfo, GetLoads, ResetPrefixCache.
#pragma once

#include <string>

#include "server/grpc/service_state.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::rpc {

class ControlService final : public v1::Control::Service {
 public:
  ControlService(ServiceState* state, std::string version)
      : state_(*state), version_(std::move(version)) {}

  grpc::Status Abort(grpc::ServerContext* context, const v1::AbortRequest* request,
                     v1::AbortResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::ModelInfo* response) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context, const v1::GetServerInfoRequest* request,
                             v1::ServerInfo* response) override;
  grpc::Status GetLoads(grpc::ServerContext* context, const v1::GetLoadsRequest* request,
                        v1::Loads* response) override;
  grpc::Status ResetPrefixCache(grpc::ServerContext* context,
                                const v1::ResetPrefixCacheRequest* request,
                                v1::ResetPrefixCacheResponse* response) override;

 private:
  ServiceState& state_;
  const std::string version_;
};

}  // namespace strata::rpc
