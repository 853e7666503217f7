// generate_request.h: proto → REST body → the shared front-end validation.
#include "server/grpc/generate_request.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "server/frontend/engine_request.h"
#include "server/frontend/generation_response.h"
#include "server/frontend/prompt_builder.h"

namespace strata::rpc {
namespace {

void AddSampling(const v1::SamplingParams& s, frontend::Json* body) {
  frontend::Json& b = *body;
  if (s.has_temperature()) b["temperature"] = s.temperature();
  if (s.has_top_p()) b["top_p"] = s.top_p();
  if (s.has_top_k()) b["top_k"] = s.top_k();
  if (s.min_p() != 0.0f) b["min_p"] = s.min_p();
  if (s.has_repetition_penalty()) b["repetition_penalty"] = s.repetition_penalty();
  if (s.presence_penalty() != 0.0f) b["presence_penalty"] = s.presence_penalty();
  if (s.frequency_penalty() != 0.0f) b["frequency_penalty"] = s.frequency_penalty();
  if (!s.logit_bias().empty()) {
    frontend::Json bias = frontend::Json::object();
    for (const auto& [id, value] : s.logit_bias()) bias[std::to_string(id)] = value;
    b["logit_bias"] = std::move(bias);
  }
  // REST seeds are int64; the bit pattern is what seeds the sampler.
  if (s.has_seed()) b["seed"] = static_cast<int64_t>(s.seed());
}

}  // namespace

frontend::Json CompletionBodyFor(const v1::GenerateRequest& r) {
  frontend::Json b = frontend::Json::object();
  if (!r.model().empty()) b["model"] = r.model();
  if (r.has_text()) {
    b["prompt"] = r.text();
  } else if (r.has_token_ids()) {
    b["prompt"] = std::vector<int32_t>(r.token_ids().ids().begin(), r.token_ids().ids().end());
  }
  if (r.has_sampling()) AddSampling(r.sampling(), &b);
  if (r.has_max_tokens()) b["max_tokens"] = r.max_tokens();
  if (r.stop_size() > 0) b["stop"] = std::vector<std::string>(r.stop().begin(), r.stop().end());
  if (r.stop_token_ids_size() > 0) {
    b["stop_token_ids"] =
        std::vector<int32_t>(r.stop_token_ids().begin(), r.stop_token_ids().end());
  }
  if (r.ignore_eos()) b["ignore_eos"] = true;
  if (r.min_tokens() != 0) b["min_tokens"] = r.min_tokens();
  if (r.has_skip_special_tokens()) b["skip_special_tokens"] = r.skip_special_tokens();
  if (r.include_stop_str_in_output()) b["include_stop_str_in_output"] = true;
  if (r.has_n()) b["n"] = r.n();
  if (r.has_logprobs()) b["logprobs"] = r.logprobs();
  if (r.has_prompt_logprobs()) b["prompt_logprobs"] = r.prompt_logprobs();
  if (r.allowed_token_ids_size() > 0) {
    b["allowed_token_ids"] =
        std::vector<int32_t>(r.allowed_token_ids().begin(), r.allowed_token_ids().end());
  }
  if (r.bad_words_size() > 0) {
    b["bad_words"] = std::vector<std::string>(r.bad_words().begin(), r.bad_words().end());
  }
  if (r.priority() != 0) b["priority"] = r.priority();
  if (!r.request_id().empty()) b["request_id"] = r.request_id();
  if (!r.cache_salt().empty()) b["cache_salt"] = r.cache_salt();
  if (!r.json_schema().empty()) {
    // BuildGeneration refuses unparsable text first; here it would reach the compiler as a
    // string, which it refuses too.
    frontend::Json schema =
        frontend::Json::parse(r.json_schema(), nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) schema = r.json_schema();
    b["response_format"] = {{"type", "json_schema"},
                            {"json_schema", {{"name", "grpc"}, {"schema", std::move(schema)}}}};
  }
  if (!r.regex().empty()) b["guided_regex"] = r.regex();
  if (!r.grammar().empty()) b["guided_grammar"] = r.grammar();
  return b;
}

absl::StatusOr<GrpcGeneration> BuildGeneration(const frontend::ServedModel& model,
                                               const frontend::RequestLimits& limits,
                                               const v1::GenerateRequest& request) {
  frontend::RequestLimits model_limits = limits;
  model_limits.vocab_size = model.vocab_size;
  model_limits.defaults = model.generation_config.defaults;
  if (!request.json_schema().empty() && !frontend::Json::accept(request.json_schema())) {
    return absl::InvalidArgumentError("json_schema is not valid JSON text");
  }
  if (request.has_max_tokens() && request.max_tokens() == 0) {  // REST's message names 'echo'
    return absl::InvalidArgumentError("'max_tokens' must be at least 1; got 0");
  }
  ASSIGN_OR_RETURN(frontend::CompletionRequest req,
                   frontend::ParseCompletionRequest(CompletionBodyFor(request), model_limits));
  if (!req.gen.model.empty() &&
      std::find(model.names.begin(), model.names.end(), req.gen.model) == model.names.end()) {
    return absl::NotFoundError(absl::StrCat("The model '", req.gen.model, "' does not exist."));
  }
  const frontend::PromptInput& input = req.prompts.at(0);
  std::vector<int32_t> prompt =
      input.text ? frontend::TextPromptIds(model, *input.text, /*add_special_tokens=*/true)
                 : input.token_ids;
  RETURN_IF_ERROR(frontend::CheckPromptIds(model, prompt, "prompt"));
  ASSIGN_OR_RETURN(int64_t max_tokens,
                   frontend::ResolveMaxTokens(model, static_cast<int64_t>(prompt.size()),
                                              req.gen.max_tokens, "prompt"));
  GrpcGeneration g;
  g.request_id = req.gen.request_id.empty() ? frontend::NewResponseId("grpc") : req.gen.request_id;
  g.detokenize = !request.has_detokenize() || request.detokenize();
  const auto filters = frontend::TokenFilters(model, req.gen);
  for (int i = 0; i < req.gen.n; ++i) {
    GrpcChoice choice;
    choice.index = i;
    choice.request = frontend::EngineRequest(model, req.gen, prompt, max_tokens, g.request_id, i,
                                             /*chat=*/false);
    choice.options = frontend::OptionsFor(req.gen, choice.request, /*parse_tool_calls=*/false);
    frontend::AddTokenFilters(filters, &choice.request);
    g.choices.push_back(std::move(choice));
  }
  return g;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace strata::rpc
