// grpc_server.h: builder, health, reflection.
#include "server/grpc/grpc_server.h"

#include <chrono>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "server/grpc/control_service.h"
#include "server/grpc/inference_service.h"

namespace strata::rpc {

struct GrpcServer::Impl {
  explicit Impl(const GrpcServerOptions& options)
      : state(options.limits, options.api_key, options.on_choice_finished),
        inference(&state),
        control(&state, options.version) {}

  void SetServing(bool serving) {
    grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
    if (health == nullptr) return;
    health->SetServingStatus(serving);  // every service name, "" included
  }

  ServiceState state;
  InferenceService inference;
  ControlService control;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  bool stopped = false;
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(GrpcServerOptions options) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  auto impl = std::make_unique<Impl>(options);
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.host.find(':') != std::string::npos
                                               ? absl::StrCat("[", options.host, "]")
                                               : options.host,
                                           ":", options.port);
  // A port already in use is an error (gRPC would otherwise share it with SO_REUSEPORT).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl->port);
  builder.RegisterService(&impl->inference);
  builder.RegisterService(&impl->control);
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    return absl::UnavailableError(absl::StrCat("gRPC: cannot listen on ", address));
  }
  impl->SetServing(false);
  LOG_INFO("grpc", "gRPC listening on {}:{}", options.host, impl->port);
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(impl)));
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GrpcServer::~GrpcServer() { Stop(); }

int GrpcServer::port() const { return impl_->port; }

void GrpcServer::SetModel(const frontend::ServedModel* model) {
  impl_->state.SetModel(model);
  impl_->SetServing(impl_->state.ready());
}

void GrpcServer::SetServerInfoProvider(std::function<std::string()> provider) {
  impl_->state.SetServerInfoProvider(std::move(provider));
}

void GrpcServer::StartDraining() {
  impl_->state.StartDraining();
  impl_->SetServing(false);
}

int64_t GrpcServer::num_in_flight() const { return impl_->state.num_in_flight(); }

void GrpcServer::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->SetServing(false);
  // Calls still running after the deadline are cancelled; RunGenerate then aborts them.
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  impl_->server->Wait();
}

}  // namespace strata::rpc
