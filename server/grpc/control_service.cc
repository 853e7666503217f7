// control_service.h.
#include "server/grpc/control_service.h"

#include <chrono>

#include "server/grpc/generate_request.h"

namespace strata::rpc {

grpc::Status ControlService::Abort(grpc::ServerContext* context, const v1::AbortRequest* request,
                                   v1::AbortResponse* response) {
  if (grpc::Status auth = state_.CheckAuth(context); !auth.ok()) return auth;
  std::vector<std::string> ids(request->request_ids().begin(), request->request_ids().end());
  response->set_num_aborted(state_.Abort(ids));
  return grpc::Status::OK;
}

grpc::Status ControlService::GetModelInfo(grpc::ServerContext* context,
                                          const v1::GetModelInfoRequest* /*request*/,
                                          v1::ModelInfo* response) {
  if (grpc::Status auth = state_.CheckAuth(context); !auth.ok()) return auth;
  absl::StatusOr<const frontend::ServedModel*> model = state_.LoadedModel();
  if (!model.ok()) return ToGrpcStatus(model.status());
  for (const std::string& name : (*model)->names) response->add_names(name);
  response->set_root((*model)->root);
  response->set_max_model_len((*model)->max_model_len);
  response->set_vocab_size((*model)->vocab_size);
  response->set_eos_token_id((*model)->eos_token_id);
  response->set_media_placeholder_token_id(
      (*model)->images != nullptr ? (*model)->images->placeholder_id() : -1);
  return grpc::Status::OK;
}

grpc::Status ControlService::GetServerInfo(grpc::ServerContext* context,
                                           const v1::GetServerInfoRequest* /*request*/,
                                           v1::ServerInfo* response) {
  if (grpc::Status auth = state_.CheckAuth(context); !auth.ok()) return auth;
  response->set_version(version_);
  response->set_ready(state_.ready());
  response->set_draining(state_.draining());
  response->set_num_requests_in_flight(state_.num_in_flight());
  if (state_.model() != nullptr) response->set_config_json(state_.ServerInfoJson());
  return grpc::Status::OK;
}

grpc::Status ControlService::GetLoads(grpc::ServerContext* context,
                                      const v1::GetLoadsRequest* /*request*/, v1::Loads* response) {
  if (grpc::Status auth = state_.CheckAuth(context); !auth.ok()) return auth;
  absl::StatusOr<const frontend::ServedModel*> model = state_.LoadedModel();
  if (!model.ok()) return ToGrpcStatus(model.status());
  const server::EngineStats stats = (*model)->engine->stats();
  response->set_num_unfinished(stats.num_unfinished);
  response->set_num_running(stats.scheduler.num_running);
  response->set_num_waiting(stats.scheduler.num_waiting);
  response->set_num_blocks(stats.scheduler.num_blocks);
  response->set_num_free_blocks(stats.scheduler.num_free_blocks);
  response->set_num_slots(stats.scheduler.num_slots);
  response->set_num_free_slots(stats.scheduler.num_free_slots);
  response->set_block_usage(stats.scheduler.block_usage);
  response->set_num_steps(stats.num_steps);
  response->set_num_aborted_total(stats.scheduler.num_aborted_total);
  return grpc::Status::OK;
}

grpc::Status ControlService::ResetPrefixCache(grpc::ServerContext* context,
                                              const v1::ResetPrefixCacheRequest* /*request*/,
                                              v1::ResetPrefixCacheResponse* response) {
  if (grpc::Status auth = state_.CheckAuth(context); !auth.ok()) return auth;
  absl::StatusOr<const frontend::ServedModel*> model = state_.LoadedModel();
  if (!model.ok()) return ToGrpcStatus(model.status());
  const auto ranks = (*model)->engine->ResetPrefixCache(std::chrono::seconds(30));
  if (!ranks.ok()) return ToGrpcStatus(ranks.status());
  response->set_num_ranks(static_cast<int32_t>(ranks->size()));
  for (const scheduler::Scheduler::PrefixCacheReset& r : *ranks) {
    response->set_num_blocks_dropped(response->num_blocks_dropped() + r.blocks);
    response->set_num_checkpoints_dropped(response->num_checkpoints_dropped() + r.checkpoints);
  }
  return grpc::Status::OK;
}

}  // namespace strata::rpc
