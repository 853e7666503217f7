// What the gRPC services share: the served model (null while loading), the drain flag, the
// number of Generate calls in flight and the engine request ids of each running call (for
// Control.Abort). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/server_context.h>

#include "absl/status/statusor.h"
#include "server/frontend/openai_request.h"
#include "server/frontend/served_model.h"
#include "server/metrics.h"

namespace strata::rpc {

class ServiceState {
 public:
  // `on_choice_finished` (may be empty): GrpcServerOptions::on_choice_finished.
  ServiceState(frontend::RequestLimits limits, std::string api_key,
               std::function<void(const server::RequestTimings&)> on_choice_finished = {})
      : limits_(limits),
        api_key_(std::move(api_key)),
        on_choice_finished_(std::move(on_choice_finished)) {}

  // With an API key, every Inference and Control call needs `authorization: Bearer KEY`
  // metadata (as REST's header): UNAUTHENTICATED otherwise. Health and reflection stay open.
  grpc::Status CheckAuth(const grpc::ServerContext* context) const;

  const frontend::RequestLimits& limits() const { return limits_; }
  // Reports a finished Generate choice (no-op without a hook).
  void ChoiceFinished(const server::RequestTimings& timings) const {
    if (on_choice_finished_) on_choice_finished_(timings);
  }
  void SetModel(const frontend::ServedModel* model) { model_ = model; }
  const frontend::ServedModel* model() const { return model_.load(); }
  void StartDraining() { draining_ = true; }
  bool draining() const { return draining_; }
  bool ready() const { return model() != nullptr && !draining(); }
  // The model for a new generation: Unavailable while loading or draining.
  absl::StatusOr<const frontend::ServedModel*> ModelForGeneration() const;
  // The model for tokenization (also while draining): Unavailable while loading.
  absl::StatusOr<const frontend::ServedModel*> LoadedModel() const;

  // Running calls: `id` → the engine request ids of its choices. Register fails
  // (InvalidArgument) when `id` is already running.
  absl::Status Register(const std::string& id, std::vector<std::string> engine_ids);
  void Unregister(const std::string& id);
  // Cancels the engine requests of the named calls; how many were running.
  int Abort(const std::vector<std::string>& ids);
  int64_t num_in_flight() const;

  void SetServerInfoProvider(std::function<std::string()> provider);
  std::string ServerInfoJson() const;  // empty without a provider

 private:
  const frontend::RequestLimits limits_;
  const std::string api_key_;
  const std::function<void(const server::RequestTimings&)> on_choice_finished_;
  std::atomic<const frontend::ServedModel*> model_{nullptr};
  std::atomic<bool> draining_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::vector<std::string>> running_;
  std::function<std::string()> server_info_;
};

}  // namespace strata::rpc
