// generate_request.h: proto → REST body → the shared front-end validation.
#include "server/grpc/generate_request.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/json_limits.h"
#include "core/status.h"
#include "server/frontend/engine_request.h"
#include "server/frontend/generation_response.h"
#include "server/frontend/prompt_builder.h"
#include "server/grpc/completion_body.h"

namespace strata::rpc {

absl::StatusOr<GrpcGeneration> BuildGeneration(const frontend::ServedModel& model,
                                               const frontend::RequestLimits& limits,
                                               const v1::GenerateRequest& request) {
  frontend::RequestLimits model_limits = limits;
  model_limits.vocab_size = model.vocab_size;
  model_limits.defaults = model.generation_config.defaults;
  // The schema text is parsed once, within the limits of core/json_limits.h.
  frontend::Json schema;
  if (!request.json_schema().empty()) {
    absl::StatusOr<frontend::Json> parsed = ParseBoundedJson(request.json_schema());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          IsJsonLimitError(parsed.status())
              ? absl::StrCat("json_schema: ", parsed.status().message())
              : absl::StrCat("json_schema is not valid JSON text: ", parsed.status().message()));
    }
    schema = *std::move(parsed);
  }
  if (request.has_max_tokens() && request.max_tokens() == 0) {  // REST's message names 'echo'
    return absl::InvalidArgumentError("'max_tokens' must be at least 1; got 0");
  }
  ASSIGN_OR_RETURN(
      frontend::CompletionRequest req,
      frontend::ParseCompletionRequest(CompletionBody(request, std::move(schema)), model_limits));
  if (!req.gen.model.empty() &&
      std::find(model.names.begin(), model.names.end(), req.gen.model) == model.names.end()) {
    return absl::NotFoundError(absl::StrCat("The model '", req.gen.model, "' does not exist."));
  }
  RETURN_IF_ERROR(frontend::CheckFieldsWithoutTokenizer(model, req.gen));
  const frontend::PromptInput& input = req.prompts.at(0);
  std::vector<int32_t> prompt = input.token_ids;
  if (input.text) {
    ASSIGN_OR_RETURN(prompt,
                     frontend::TextPromptIds(model, *input.text, /*add_special_tokens=*/true));
  }
  RETURN_IF_ERROR(frontend::CheckPromptIds(model, prompt, "prompt"));
  ASSIGN_OR_RETURN(int64_t max_tokens,
                   frontend::ResolveMaxTokens(model, static_cast<int64_t>(prompt.size()),
                                              req.gen.max_tokens, "prompt"));
  GrpcGeneration g;
  g.request_id = req.gen.request_id.empty() ? frontend::NewResponseId("grpc") : req.gen.request_id;
  g.detokenize = !request.has_detokenize() || request.detokenize();
  g.return_progress = request.return_progress();
  const auto filters = frontend::TokenFilters(model, req.gen);
  for (int i = 0; i < req.gen.n; ++i) {
    GrpcChoice choice;
    choice.index = i;
    choice.request = frontend::EngineRequest(model, req.gen, prompt, max_tokens, g.request_id, i,
                                             /*chat=*/false);
    choice.options = frontend::OptionsFor(req.gen, choice.request, /*parse_tool_calls=*/false);
    frontend::AddTokenFilters(filters, &choice.request);
    choice.request.report_prefill_progress = g.return_progress;
    g.choices.push_back(std::move(choice));
  }
  return g;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace strata::rpc
