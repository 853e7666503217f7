// inference_service.h: Generate (generate_call.h), Tokenize and Detokenize (as REST's
// /tokenize and /detokenize).
#include "server/grpc/inference_service.h"

#include "absl/strings/str_cat.h"
#include "server/frontend/choice_decoder.h"
#include "server/frontend/prompt_builder.h"
#include "server/grpc/generate_call.h"
#include "server/grpc/generate_request.h"

namespace strata::rpc {
namespace {

absl::StatusOr<const frontend::ServedModel*> Resolve(const ServiceState& state,
                                                     const std::string& name) {
  absl::StatusOr<const frontend::ServedModel*> model = state.LoadedModel();
  if (!model.ok() || name.empty()) return model;
  for (const std::string& served : (*model)->names) {
    if (served == name) return model;
  }
  return absl::NotFoundError(absl::StrCat("The model '", name, "' does not exist."));
}

}  // namespace

grpc::Status InferenceService::Generate(grpc::ServerContext* context,
                                        const v1::GenerateRequest* request,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  if (grpc::Status auth = state_.CheckAuth(context); !auth.ok()) return auth;
  return RunGenerate(state_, context, *request, writer, absl::Now());
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* context,
                                        const v1::TokenizeRequest* request,
                                        v1::TokenizeResponse* response) {
  if (grpc::Status auth = state_.CheckAuth(context); !auth.ok()) return auth;
  absl::StatusOr<const frontend::ServedModel*> model = Resolve(state_, request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  const bool add_special = !request->has_add_special_tokens() || request->add_special_tokens();
  const absl::StatusOr<std::vector<int32_t>> tokenized =
      frontend::TextPromptIds(**model, request->text(), add_special, "text");
  if (!tokenized.ok()) return ToGrpcStatus(tokenized.status());
  const std::vector<int32_t>& ids = *tokenized;
  response->mutable_token_ids()->Add(ids.begin(), ids.end());
  if (request->return_token_strs()) {
    for (int32_t id : ids) response->add_token_strs(frontend::TokenText(*(*model)->tokenizer, id));
  }
  response->set_max_model_len((*model)->max_model_len);
  return grpc::Status::OK;
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext* context,
                                          const v1::DetokenizeRequest* request,
                                          v1::DetokenizeResponse* response) {
  if (grpc::Status auth = state_.CheckAuth(context); !auth.ok()) return auth;
  absl::StatusOr<const frontend::ServedModel*> model = Resolve(state_, request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  if (absl::Status s = frontend::RequireTokenizer(**model, "token_ids"); !s.ok()) {
    return ToGrpcStatus(s);
  }
  const engine::Tokenizer& tokenizer = *(*model)->tokenizer;
  std::vector<int32_t> ids(request->token_ids().begin(), request->token_ids().end());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= tokenizer.vocab_size()) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("token id ", ids[i], " is outside the tokenizer's vocabulary [0, ",
                       tokenizer.vocab_size(), ")"));
    }
  }
  absl::StatusOr<std::string> text = tokenizer.Decode(ids);
  if (!text.ok()) return ToGrpcStatus(text.status());
  response->set_text(*text);
  return grpc::Status::OK;
}

}  // namespace strata::rpc
