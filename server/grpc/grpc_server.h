// The gRPC server of `strata serve`: strata.v1.Inference and strata.v1.Control on the same
// engine loop as the HTTP server, the standard grpc.health.v1.Health service (SERVING only
// while a model is loaded and the server is not draining; for "" and both service names) and
// server reflection (grpcurl-style tools list and call the API without .proto files).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/frontend/openai_request.h"
#include "server/frontend/served_model.h"
#include "server/metrics.h"

namespace strata::rpc {

struct GrpcServerOptions {
  std::string host = "0.0.0.0";
  int port = 50051;                // 0: any free port (see GrpcServer::port)
  frontend::RequestLimits limits;  // vocab_size is taken from the model
  std::string version;             // reported by GetServerInfo
  std::string api_key;             // --api-key: required as `authorization: Bearer` metadata
  // Called once per Generate choice when it ends (finished, cancelled: "abort", failed:
  // "error") with its timings as the client saw them, on the call's thread — what REST's
  // frontend::ServiceOptions::on_choice_finished gets (serve: request metrics and log line).
  std::function<void(const server::RequestTimings&)> on_choice_finished;
};

class GrpcServer {
 public:
  // Listens at once (health NOT_SERVING, Generate UNAVAILABLE until SetModel).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(GrpcServerOptions options);
  ~GrpcServer();  // Stop()

  int port() const;
  // Makes the model servable; `model` must outlive the server.
  void SetModel(const frontend::ServedModel* model);
  // The JSON text GetServerInfo reports as config_json.
  void SetServerInfoProvider(std::function<std::string()> provider);
  // Health NOT_SERVING; new Generate calls UNAVAILABLE; calls in flight continue.
  void StartDraining();
  int64_t num_in_flight() const;
  // Cancels the calls still running (their engine requests are aborted) and stops listening.
  void Stop();

 private:
  struct Impl;
  explicit GrpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::rpc
