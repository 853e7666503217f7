// service_state.h: readiness, running calls and aborts.
#include "server/grpc/service_state.h"

#include "server/frontend/api_key.h"

#include "absl/strings/str_cat.h"

namespace strata::rpc {

absl::StatusOr<const frontend::ServedModel*> ServiceState::ModelForGeneration() const {
  if (draining()) {
    return absl::UnavailableError("the server is shutting down and accepts no new requests");
  }
  return LoadedModel();
}

absl::StatusOr<const frontend::ServedModel*> ServiceState::LoadedModel() const {
  const frontend::ServedModel* model = this->model();
  if (model == nullptr) return absl::UnavailableError("the model is still loading");
  return model;
}

absl::Status ServiceState::Register(const std::string& id, std::vector<std::string> engine_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!running_.emplace(id, std::move(engine_ids)).second) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_id '", id, "' is already in use by a running request"));
  }
  return absl::OkStatus();
}

void ServiceState::Unregister(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  running_.erase(id);
}

int ServiceState::Abort(const std::vector<std::string>& ids) {
  const frontend::ServedModel* model = this->model();
  if (model == nullptr) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const std::string& id : ids) {
    auto it = running_.find(id);
    if (it == running_.end()) continue;
    for (const std::string& engine_id : it->second) model->engine->Cancel(engine_id);
    ++n;
  }
  return n;
}

int64_t ServiceState::num_in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(running_.size());
}

void ServiceState::SetServerInfoProvider(std::function<std::string()> provider) {
  std::lock_guard<std::mutex> lock(mu_);
  server_info_ = std::move(provider);
}

grpc::Status ServiceState::CheckAuth(const grpc::ServerContext* context) const {
  if (api_key_.empty()) return grpc::Status::OK;
  const auto& metadata = context->client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing API key: send 'authorization: Bearer <key>' metadata");
  }
  if (!frontend::BearerMatches(std::string_view(it->second.data(), it->second.size()), api_key_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "incorrect API key provided");
  }
  return grpc::Status::OK;
}

std::string ServiceState::ServerInfoJson() const {
  std::function<std::string()> provider;
  {
    std::lock_guard<std::mutex> lock(mu_);
    provider = server_info_;
  }
  return provider ? provider() : std::string();
}

}  // namespace strata::rpc
