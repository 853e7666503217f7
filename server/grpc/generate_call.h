// One Generate call, run to its end on the gRPC thread that received it: submits the choices
// to the engine loop, decodes their events (frontend::ChoiceDecoder, as REST does) and writes
// Chunk / Complete messages. Client cancellation, a passed deadline, a failed write or
// Control.Abort cancel the engine requests, which frees their cache at the next engine step.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/sync_stream.h>

#include "absl/time/time.h"
#include "server/grpc/service_state.h"
#include "strata/v1/inference.pb.h"

namespace strata::rpc {

// `received`: when the call arrived (the origin of Complete.timings).
grpc::Status RunGenerate(ServiceState& state, grpc::ServerContext* context,
                         const v1::GenerateRequest& request,
                         grpc::ServerWriterInterface<v1::GenerateResponse>* writer,
                         absl::Time received);

}  // namespace strata::rpc
