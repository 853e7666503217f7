// engine_request.h: the engine request and decoding options of one choice.
#include "server/frontend/engine_request.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "engine/structured/cfg_constraint.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/reasoning_gate.h"
#include "engine/token_filters.h"
#include "server/frontend/api_error.h"
#include "server/frontend/generation_response.h"
#include "server/frontend/prompt_builder.h"

namespace strata::frontend {

scheduler::Request EngineRequest(const ServedModel& model, const GenerationFields& gen,
                                 const std::vector<int32_t>& prompt, int64_t max_tokens,
                                 const std::string& id, int i, bool chat) {
  scheduler::Request r;
  r.request_id = absl::StrCat(id, "-", i);
  r.prompt = prompt;
  r.sampling = gen.sampling;
  if (r.sampling.seed) r.sampling.seed = *r.sampling.seed + static_cast<uint64_t>(i);
  r.max_tokens = max_tokens;
  r.stop_token_ids = gen.stop_token_ids;
  if (!gen.ignore_eos) {
    auto add_stop = [&r, &model](int32_t id) {
      if (id == model.eos_token_id) return;
      if (std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), id) !=
          r.stop_token_ids.end()) {
        return;
      }
      r.stop_token_ids.push_back(id);
    };
    if (chat) {
      for (int32_t stop : model.chat_stop_token_ids) add_stop(stop);
    }
    for (int32_t eos : model.generation_config.eos_token_ids) add_stop(eos);
  }
  r.eos_token_id = model.eos_token_id;
  r.ignore_eos = gen.ignore_eos;
  r.priority = gen.priority;
  r.cache_salt = CacheSaltHash(gen.cache_salt);
  r.num_logprobs = gen.num_logprobs;
  r.prompt_logprobs = gen.prompt_logprobs;
  r.fallback_seed = RandomSeed();
  if (gen.min_tokens > 0) {
    r.sampling.min_tokens = gen.min_tokens;
    r.sampling.min_tokens_stop_ids = r.stop_token_ids;
    if (r.eos_token_id >= 0 && !r.ignore_eos) {
      r.sampling.min_tokens_stop_ids.push_back(static_cast<int32_t>(r.eos_token_id));
    }
  }
  if (gen.constrained()) {
    CHECK(model.token_vocab != nullptr);
    std::vector<int32_t> end_ids = r.stop_token_ids;
    if (r.eos_token_id >= 0) end_ids.push_back(static_cast<int32_t>(r.eos_token_id));
    if (gen.json_grammar) {
      r.sampling.constraint = std::make_shared<structured::JsonConstraint>(
          gen.json_grammar, model.token_vocab, std::move(end_ids));
    } else {
      r.sampling.constraint = std::make_shared<structured::CfgConstraint>(
          gen.cfg_grammar, model.token_vocab, std::move(end_ids));
    }
  }
  return r;
}

absl::Status ForceToolCalls(const ServedModel& model, const ChatCompletionRequest& req,
                            scheduler::Request* r) {
  if (!model.tool_call_tokens || !model.token_vocab) {
    return InvalidField("tool_choice",
                        "a required or named tool_choice needs the model's tool-call tokens "
                        "(<|tool_calls_section_begin|> and the others), which its tokenizer "
                        "does not have",
                        "unsupported_value");
  }
  structured::ToolCallOptions o;
  o.tools = req.forced_tools;
  o.max_calls =
      req.tool_choice == ToolChoice::kRequired && req.parallel_tool_calls ? kMaxForcedToolCalls : 1;
  o.markers = *model.tool_call_tokens;
  o.end_ids = r->stop_token_ids;
  if (r->eos_token_id >= 0) o.end_ids.push_back(static_cast<int32_t>(r->eos_token_id));
  r->sampling.constraint =
      std::make_shared<structured::ToolCallConstraint>(std::move(o), model.token_vocab);
  return absl::OkStatus();
}

void ApplyReasoning(const ServedModel& model, const std::vector<int32_t>& prompt,
                    scheduler::Request* r, ChoiceOptions* options) {
  if (model.think_end_id < 0) return;
  options->think_begin_id = model.think_begin_id;
  options->think_end_id = model.think_end_id;
  options->reasoning_open =
      model.think_begin_id >= 0 && !prompt.empty() && prompt.back() == model.think_begin_id;
  if (options->reasoning_open && r->sampling.constraint) {
    r->sampling.constraint = std::make_shared<structured::ReasoningGate>(
        std::move(r->sampling.constraint), model.think_end_id);
  }
}

std::shared_ptr<const engine::TokenConstraint> TokenFilters(const ServedModel& model,
                                                            const GenerationFields& gen) {
  std::vector<std::shared_ptr<const engine::TokenConstraint>> parts;
  if (!gen.allowed_token_ids.empty()) {
    parts.push_back(engine::AllowedTokensConstraint(gen.allowed_token_ids));
  }
  std::vector<std::vector<int32_t>> words;
  for (const std::string& word : gen.bad_words) {
    const std::string bare(absl::StripLeadingAsciiWhitespace(word));
    if (bare.empty()) continue;
    // (Without a tokenizer none: CheckFieldsWithoutTokenizer refuses bad_words first.)
    std::vector<int32_t> plain =
        TextPromptIds(model, bare, /*add_special_tokens=*/false).value_or(std::vector<int32_t>());
    std::vector<int32_t> spaced = TextPromptIds(model, " " + bare, /*add_special_tokens=*/false)
                                      .value_or(std::vector<int32_t>());
    const bool spaced_differs =
        !spaced.empty() && spaced.size() == plain.size() && spaced.front() != plain.front();
    if (!plain.empty()) words.push_back(std::move(plain));
    if (spaced_differs) words.push_back(std::move(spaced));
  }
  if (!words.empty()) parts.push_back(engine::BadWordsConstraint(std::move(words)));
  return engine::CombineConstraints(std::move(parts));
}

void AddTokenFilters(std::shared_ptr<const engine::TokenConstraint> filters,
                     scheduler::Request* r) {
  if (filters == nullptr) return;
  r->sampling.constraint = engine::CombineConstraints({r->sampling.constraint, std::move(filters)});
}

ChoiceOptions OptionsFor(const GenerationFields& gen, const scheduler::Request& r,
                         bool parse_tool_calls) {
  ChoiceOptions o;
  o.detokenizer.skip_special_tokens = parse_tool_calls ? false : gen.skip_special_tokens;
  o.detokenizer.stop = gen.stop;
  o.detokenizer.include_stop_str_in_output = gen.include_stop_str_in_output;
  o.detokenizer.min_tokens = gen.min_tokens;
  o.parse_tool_calls = parse_tool_calls;
  o.logprobs = gen.num_logprobs >= 0;
  o.hidden_stop_ids = r.stop_token_ids;
  if (r.eos_token_id >= 0) o.hidden_stop_ids.push_back(static_cast<int32_t>(r.eos_token_id));
  return o;
}

}  // namespace strata::frontend
