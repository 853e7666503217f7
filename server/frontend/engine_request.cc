// engine_request.h: the engine request and decoding options of one choice.
#include "server/frontend/engine_request.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "engine/structured/cfg_constraint.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/reasoning_gate.h"
#include "engine/structured/thinking_budget.h"
#include "engine/structured/xtml_constraint.h"
#include "engine/token_filters.h"
#include "engine/tokenizer/xtml_markers.h"
#include "engine/tokenizer/xtml_output_parser.h"
#include "server/frontend/api_error.h"
#include "server/frontend/generation_response.h"
#include "server/frontend/prompt_builder.h"

namespace strata::frontend {

namespace {

// The XTML channel a K3 prompt leaves open at its end (`<|open|>NAME<|sep|>`): "think",
// "response", or "" when it ends otherwise.
std::string OpenXtmlChannel(const engine::Tokenizer& tokenizer,
                            const std::vector<int32_t>& prompt) {
  const std::optional<int32_t> open = tokenizer.SpecialTokenId(engine::xtml::kOpen);
  const std::optional<int32_t> sep = tokenizer.SpecialTokenId(engine::xtml::kSep);
  if (!open || !sep || prompt.size() < 3 || prompt.back() != *sep) return "";
  constexpr size_t kMaxNameTokens = 8;
  for (size_t i = prompt.size() - 2; i + kMaxNameTokens + 1 >= prompt.size() && i > 0; --i) {
    if (prompt[i - 1] != *open) continue;
    absl::StatusOr<std::string> name =
        tokenizer.Decode(absl::MakeConstSpan(prompt).subspan(i, prompt.size() - 1 - i),
                         /*skip_special_tokens=*/false);
    return name.ok() ? *name : "";
  }
  return "";
}

// A Kimi K3 model: chat replies are XTML (ApplyReasoning).
bool XtmlReplies(const ServedModel& model) {
  return model.tokenizer != nullptr && !model.skip_tokenizer_init &&
         engine::RepliesInXtml(*model.tokenizer);
}

// The XTML markers' control ids; the tokenizer has them (RepliesInXtml).
structured::XtmlMarkers XtmlMarkerIds(const engine::Tokenizer& tokenizer) {
  auto id = [&tokenizer](std::string_view marker) {
    const std::optional<int32_t> v = tokenizer.SpecialTokenId(marker);
    CHECK(v.has_value()) << marker;
    return *v;
  };
  return {id(engine::xtml::kOpen), id(engine::xtml::kClose), id(engine::xtml::kSep),
          id(engine::xtml::kEndOfMessage)};
}

// The reply constraint of a K3 chat request: after the reasoning when the prompt opened the
// think channel (xtml_constraint.h).
structured::XtmlReplyOptions XtmlReplyOptionsFor(const ServedModel& model,
                                                 const scheduler::Request& r) {
  structured::XtmlReplyOptions o;
  o.markers = XtmlMarkerIds(*model.tokenizer);
  o.thinking = OpenXtmlChannel(*model.tokenizer, r.prompt) == "think";
  o.end_ids = r.stop_token_ids;
  if (r.eos_token_id >= 0) o.end_ids.push_back(static_cast<int32_t>(r.eos_token_id));
  return o;
}

}  // namespace

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
    // Kimi K3 chat: the JSON or grammar is the response channel's body, which <|close|> ends.
    const bool xtml = chat && XtmlReplies(model);
    if (xtml) end_ids = {XtmlMarkerIds(*model.tokenizer).close};
    if (gen.json_grammar) {
      r.sampling.constraint = std::make_shared<structured::JsonConstraint>(
          gen.json_grammar, model.token_vocab, std::move(end_ids));
    } else {
      r.sampling.constraint = std::make_shared<structured::CfgConstraint>(
          gen.cfg_grammar, model.token_vocab, std::move(end_ids));
    }
    if (xtml) {
      structured::XtmlReplyOptions o = XtmlReplyOptionsFor(model, r);
      o.response = std::move(r.sampling.constraint);
      r.sampling.constraint =
          std::make_shared<structured::XtmlReplyConstraint>(std::move(o), model.token_vocab);
    }
  }
  return r;
}

absl::Status ForceToolCalls(const ServedModel& model, const ChatCompletionRequest& req,
                            scheduler::Request* r) {
  if (XtmlReplies(model) && model.token_vocab) {
    // Kimi K3: the tools channel of the XTML reply, after an empty response channel.
    structured::XtmlReplyOptions o = XtmlReplyOptionsFor(model, *r);
    for (const structured::ToolSpec& spec : req.forced_tools) {
      absl::StatusOr<structured::XtmlTool> tool =
          structured::XtmlToolFor(spec.name, *spec.arguments);
      if (!tool.ok()) {
        return InvalidField("tool_choice", std::string(tool.status().message()),
                            "unsupported_value");
      }
      o.tools.push_back(*std::move(tool));
    }
    o.max_calls = req.tool_choice == ToolChoice::kRequired && req.parallel_tool_calls
                      ? kMaxForcedToolCalls
                      : 1;
    r->sampling.constraint =
        std::make_shared<structured::XtmlReplyConstraint>(std::move(o), model.token_vocab);
    return absl::OkStatus();
  }
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
  if (model.tokenizer != nullptr && !model.skip_tokenizer_init &&
      engine::RepliesInXtml(*model.tokenizer)) {
    // Kimi K3: the reply is XTML in the channel the prompt opened, read with control tokens
    // kept, and it ends at <|end_of_msg|> (K3's EOS, whatever the config names).
    options->xtml = true;
    options->xtml_thinking = OpenXtmlChannel(*model.tokenizer, prompt) == "think";
    options->detokenizer.skip_special_tokens = false;
    const std::optional<int32_t> end = model.tokenizer->SpecialTokenId(engine::xtml::kEndOfMessage);
    if (end && !r->ignore_eos && *end != r->eos_token_id &&
        std::find(r->stop_token_ids.begin(), r->stop_token_ids.end(), *end) ==
            r->stop_token_ids.end()) {
      r->stop_token_ids.push_back(*end);
      if (r->sampling.min_tokens > 0) r->sampling.min_tokens_stop_ids.push_back(*end);
      options->hidden_stop_ids.push_back(*end);
    }
    return;
  }
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

std::optional<structured::ThinkingEnd> ThinkingEndFor(const ServedModel& model,
                                                      const ChoiceOptions& options) {
  if (model.token_vocab == nullptr || model.tokenizer == nullptr) return std::nullopt;
  structured::ThinkingEnd end;
  if (options.xtml && options.xtml_thinking) {
    const structured::XtmlMarkers markers = XtmlMarkerIds(*model.tokenizer);
    end.first_id = markers.close;
    end.text = "think";
    end.last_id = markers.sep;
    auto element = [&](int32_t marker, std::string_view tag) {
      end.forced_ids.push_back(marker);
      for (int32_t id : model.tokenizer->Encode(tag, {.parse_special = false})) {
        end.forced_ids.push_back(id);
      }
      end.forced_ids.push_back(markers.sep);
    };
    element(markers.close, end.text);
    element(markers.open, "response");
  } else if (options.reasoning_open && model.think_end_id >= 0) {
    end.first_id = model.think_end_id;
    end.forced_ids = {model.think_end_id};
  } else {
    return std::nullopt;
  }
  return end;
}

void ApplyThinkingBudget(const ServedModel& model, const structured::ThinkingEnd& end,
                         int64_t budget_tokens, scheduler::Request* r) {
  r->sampling.constraint = std::make_shared<structured::ThinkingBudget>(
      std::move(r->sampling.constraint), end, budget_tokens, model.token_vocab);
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
