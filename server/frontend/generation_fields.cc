// ParseGenerationFields, ParseJsonBody, NoteUnknownFields (openai_request.h).
#include <iterator>
#include <mutex>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "core/status.h"
#include "engine/tokenizer/utf8.h"
#include "server/frontend/api_error.h"
#include "server/frontend/json_fields.h"
#include "server/frontend/openai_request.h"

namespace strata::frontend {
namespace {

// Every field ParseGenerationFields reads (ReadResponseFormat's too).
constexpr std::string_view kGenerationFields[] = {"model",
                                                  "stream",
                                                  "stream_options",
                                                  "max_tokens",
                                                  "max_completion_tokens",
                                                  "temperature",
                                                  "top_p",
                                                  "top_k",
                                                  "min_p",
                                                  "presence_penalty",
                                                  "frequency_penalty",
                                                  "repetition_penalty",
                                                  "stop",
                                                  "stop_token_ids",
                                                  "seed",
                                                  "n",
                                                  "best_of",
                                                  "use_beam_search",
                                                  "logprobs",
                                                  "logit_bias",
                                                  "prompt_logprobs",
                                                  "allowed_token_ids",
                                                  "bad_words",
                                                  "truncate_prompt_tokens",
                                                  "response_format",
                                                  "user",
                                                  "priority",
                                                  "request_id",
                                                  "cache_salt",
                                                  "guided_json",
                                                  "guided_choice",
                                                  "guided_regex",
                                                  "guided_grammar",
                                                  "grammar",
                                                  "ebnf",
                                                  "json_schema",
                                                  "regex",
                                                  "structured_outputs",
                                                  "ignore_eos",
                                                  "min_tokens",
                                                  "skip_special_tokens",
                                                  "include_stop_str_in_output",
                                                  "return_token_ids",
                                                  "return_progress"};

// best_of and use_beam_search: fields of vLLM's requests Strata cannot honour, refused rather
// than ignored (a client asking for them would get different outputs than it expects). vLLM's
// engine refuses best_of > 1 too; best_of = n asks for nothing more than n.
absl::Status ReadUnsupportedSampling(const FieldReader& r, const RequestLimits& limits, int n) {
  ASSIGN_OR_RETURN(auto best_of, r.Integer("best_of", 1, limits.max_n));
  if (best_of && *best_of != n) {
    return InvalidField("best_of",
                        absl::StrCat("'best_of' other than n (", n, ") is not supported"),
                        "unsupported_value");
  }
  ASSIGN_OR_RETURN(auto beam, r.Bool("use_beam_search"));
  if (beam.value_or(false)) {
    return InvalidField("use_beam_search", "'use_beam_search' is not supported: Strata samples",
                        "unsupported_value");
  }
  return absl::OkStatus();
}

// A list of non-empty strings at `param` (or one string, with `single`): at most `max_count` of
// at most `max_bytes` each; empty strings are dropped.
absl::Status ReadStringList(const FieldReader& r, const std::string& param, bool single,
                            int max_count, int max_bytes, std::vector<std::string>* out) {
  const Json* list = r.Find(param);
  if (!list) return absl::OkStatus();
  if (single && list->is_string()) {
    if (!list->get_ref<const std::string&>().empty()) out->push_back(list->get<std::string>());
  } else if (list->is_array()) {
    if (static_cast<int>(list->size()) > max_count) {
      return InvalidField(param, absl::StrCat("'", param, "' has ", list->size(),
                                              " strings; at most ", max_count, " are allowed"));
    }
    for (size_t i = 0; i < list->size(); ++i) {
      if (!(*list)[i].is_string()) {
        return InvalidType(absl::StrCat(param, "[", i, "]"), "a string");
      }
      const std::string& s = (*list)[i].get_ref<const std::string&>();
      if (!s.empty()) out->push_back(s);
    }
  } else {
    return InvalidType(param, single ? "a string or an array of strings" : "an array of strings");
  }
  for (size_t i = 0; i < out->size(); ++i) {
    if (static_cast<int>((*out)[i].size()) > max_bytes) {
      return InvalidField(param, absl::StrCat(param, " string ", i, " has ", (*out)[i].size(),
                                              " bytes; the limit is ", max_bytes));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadTokenIdList(const Json& list, const std::string& param, int64_t vocab,
                             std::vector<int32_t>* out) {
  if (!list.is_array()) return InvalidType(param, "an array of token ids");
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& id = list[i];
    const std::string path = absl::StrCat(param, "[", i, "]");
    if (!id.is_number_integer()) return InvalidType(path, "an integer token id");
    if (id.is_number_unsigned() ? id.get<uint64_t>() >= static_cast<uint64_t>(vocab)
                                : (id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab)) {
      return InvalidField(path, absl::StrCat("token id ", id.dump(), " in '", param,
                                             "' is outside the vocabulary [0, ", vocab, ")"));
    }
    out->push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

absl::Status ReadLogitBias(const FieldReader& r, int64_t vocab, engine::SamplingParams* s) {
  const Json* bias = r.Find("logit_bias");
  if (!bias) return absl::OkStatus();
  if (!bias->is_object()) return InvalidType("logit_bias", "an object of token id -> bias");
  for (const auto& [key, value] : bias->items()) {
    int64_t id = 0;
    const std::string path = absl::StrCat("logit_bias.", key);
    if (!absl::SimpleAtoi(key, &id) || id < 0 || id >= vocab) {
      return InvalidField("logit_bias", absl::StrCat("logit_bias key '", key,
                                                     "' is not a token id in [0, ", vocab, ")"));
    }
    if (!value.is_number()) return InvalidType(path, "a number in [-100, 100]");
    const double b = value.get<double>();
    if (!(b >= -100.0 && b <= 100.0)) {
      return InvalidField(
          "logit_bias", absl::StrCat("'", path, "' must be in [-100, 100]; got ", FormatNumber(b)));
    }
    s->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  return absl::OkStatus();
}

absl::Status ReadSampling(const FieldReader& r, const RequestLimits& limits,
                          engine::SamplingParams* s) {
  ASSIGN_OR_RETURN(auto temperature, r.Number("temperature", 0, 2));
  ASSIGN_OR_RETURN(auto top_p, r.Number("top_p", 0, 1, /*min_exclusive=*/true));
  ASSIGN_OR_RETURN(auto top_k, r.Integer("top_k", -1, INT32_MAX));
  ASSIGN_OR_RETURN(auto min_p, r.Number("min_p", 0, 1));
  ASSIGN_OR_RETURN(auto presence, r.Number("presence_penalty", -2, 2));
  ASSIGN_OR_RETURN(auto frequency, r.Number("frequency_penalty", -2, 2));
  ASSIGN_OR_RETURN(auto repetition, r.Number("repetition_penalty", 0, 2, /*min_exclusive=*/true));
  ASSIGN_OR_RETURN(auto seed, r.Integer("seed", INT64_MIN, INT64_MAX));
  const GenerationDefaults& d = limits.defaults;
  s->temperature = temperature ? static_cast<float>(*temperature) : d.temperature.value_or(1.0f);
  s->top_p = top_p ? static_cast<float>(*top_p) : d.top_p.value_or(1.0f);
  s->top_k = top_k ? static_cast<int>(*top_k) : d.top_k.value_or(0);
  s->min_p = min_p ? static_cast<float>(*min_p) : d.min_p.value_or(0.0f);
  s->presence_penalty = static_cast<float>(presence.value_or(0.0));
  s->frequency_penalty = static_cast<float>(frequency.value_or(0.0));
  s->repetition_penalty =
      repetition ? static_cast<float>(*repetition) : d.repetition_penalty.value_or(1.0f);
  if (seed) s->seed = static_cast<uint64_t>(*seed);
  return ReadLogitBias(r, limits.vocab_size, s);
}

absl::Status ReadLogprobs(const FieldReader& r, const RequestLimits& limits, bool chat,
                          GenerationFields* g) {
  if (chat) {
    ASSIGN_OR_RETURN(auto logprobs, r.Bool("logprobs"));
    ASSIGN_OR_RETURN(auto top, r.Integer("top_logprobs", 0, limits.max_logprobs));
    if (top && !logprobs.value_or(false)) {
      return InvalidField("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    }
    if (logprobs.value_or(false)) g->num_logprobs = static_cast<int>(top.value_or(0));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(auto logprobs, r.Integer("logprobs", 0, limits.max_logprobs));
  if (logprobs) g->num_logprobs = static_cast<int>(*logprobs);
  return absl::OkStatus();
}

absl::Status ReadPromptLogprobs(const FieldReader& r, const RequestLimits& limits,
                                GenerationFields* g) {
  ASSIGN_OR_RETURN(auto prompt, r.Integer("prompt_logprobs", 0, limits.max_logprobs));
  if (!prompt) return absl::OkStatus();
  if (g->stream) {
    // As vLLM: stream chunks have no place for them.
    return InvalidField("prompt_logprobs", "'prompt_logprobs' is not available with stream: true");
  }
  g->prompt_logprobs = static_cast<int>(*prompt);
  return absl::OkStatus();
}

absl::Status ReadStreamFields(const FieldReader& r, GenerationFields* g) {
  ASSIGN_OR_RETURN(auto stream, r.Bool("stream"));
  g->stream = stream.value_or(false);
  // llama.cpp's return_progress: prompt_progress chunks while the prompt prefills. Accepted and
  // ignored without stream (as llama.cpp: the progress is a stream's).
  ASSIGN_OR_RETURN(auto progress, r.Bool("return_progress"));
  g->return_progress = g->stream && progress.value_or(false);
  if (const Json* options = r.Find("stream_options")) {
    if (!options->is_object()) return InvalidType("stream_options", "an object");
    if (!g->stream) {
      return InvalidField("stream_options", "'stream_options' is only allowed with stream: true");
    }
    FieldReader o(*options, "stream_options.");
    ASSIGN_OR_RETURN(auto usage, o.Bool("include_usage"));
    g->include_usage = usage.value_or(false);
    ASSIGN_OR_RETURN(auto continuous, o.Bool("continuous_usage_stats"));
    g->continuous_usage = continuous.value_or(false);
  }
  return absl::OkStatus();
}

absl::Status ReadVllmExtras(const FieldReader& r, GenerationFields* g) {
  ASSIGN_OR_RETURN(auto ignore_eos, r.Bool("ignore_eos"));
  ASSIGN_OR_RETURN(auto skip, r.Bool("skip_special_tokens"));
  ASSIGN_OR_RETURN(auto include_stop, r.Bool("include_stop_str_in_output"));
  ASSIGN_OR_RETURN(auto return_token_ids, r.Bool("return_token_ids"));
  ASSIGN_OR_RETURN(auto priority, r.Integer("priority", INT32_MIN, INT32_MAX));
  ASSIGN_OR_RETURN(auto request_id, r.String("request_id"));
  ASSIGN_OR_RETURN(auto cache_salt, r.String("cache_salt"));
  ASSIGN_OR_RETURN(auto min_tokens, r.Integer("min_tokens", 0, kMaxTokensLimit));
  ASSIGN_OR_RETURN(g->truncate_prompt_tokens,
                   r.Integer("truncate_prompt_tokens", -1, kMaxTokensLimit));
  if (g->truncate_prompt_tokens == 0) {
    return InvalidField("truncate_prompt_tokens",
                        "'truncate_prompt_tokens' must be -1 (as many as fit) or at least 1");
  }
  RETURN_IF_ERROR(r.String("user").status());  // accepted, ignored
  g->min_tokens = min_tokens.value_or(0);
  g->ignore_eos = ignore_eos.value_or(false);
  g->skip_special_tokens = skip.value_or(true);
  g->include_stop_str_in_output = include_stop.value_or(false);
  g->return_token_ids = return_token_ids.value_or(false);
  g->priority = static_cast<int>(priority.value_or(0));
  if (request_id && request_id->size() > 256) {
    return InvalidField("request_id", "'request_id' must be at most 256 bytes");
  }
  g->request_id = request_id.value_or("");
  g->cache_salt = cache_salt.value_or("");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationFields> ParseGenerationFields(const Json& body,
                                                       const RequestLimits& limits,
                                                       bool logprobs_style_chat) {
  GenerationFields g;
  FieldReader r(body);
  ASSIGN_OR_RETURN(auto model, r.String("model"));
  g.model = model.value_or("");
  RETURN_IF_ERROR(ReadSampling(r, limits, &g.sampling));
  // Completions take max_tokens 0 with echo (checked by ParseCompletionRequest).
  ASSIGN_OR_RETURN(auto max_tokens,
                   r.Integer("max_tokens", logprobs_style_chat ? 1 : 0, kMaxTokensLimit));
  ASSIGN_OR_RETURN(auto max_completion, r.Integer("max_completion_tokens", 1, kMaxTokensLimit));
  g.max_tokens = max_completion ? max_completion : max_tokens;  // as vLLM: the newer name wins
  ASSIGN_OR_RETURN(auto n, r.Integer("n", 1, limits.max_n));
  g.n = static_cast<int>(n.value_or(1));
  RETURN_IF_ERROR(ReadUnsupportedSampling(r, limits, g.n));
  RETURN_IF_ERROR(ReadStringList(r, "stop", /*single=*/true, limits.max_stop_strings,
                                 limits.max_stop_chars, &g.stop));
  if (const Json* ids = r.Find("stop_token_ids")) {
    RETURN_IF_ERROR(ReadTokenIdList(*ids, "stop_token_ids", limits.vocab_size, &g.stop_token_ids));
  }
  // vLLM's token filters: sampling only among allowed_token_ids; bad_words never completed.
  if (const Json* ids = r.Find("allowed_token_ids"); ids && !ids->is_null()) {
    RETURN_IF_ERROR(
        ReadTokenIdList(*ids, "allowed_token_ids", limits.vocab_size, &g.allowed_token_ids));
    if (g.allowed_token_ids.empty()) {
      return InvalidField("allowed_token_ids", "'allowed_token_ids' must not be empty");
    }
  }
  RETURN_IF_ERROR(ReadStringList(r, "bad_words", /*single=*/false, limits.max_stop_strings,
                                 limits.max_stop_chars, &g.bad_words));
  RETURN_IF_ERROR(ReadLogprobs(r, limits, logprobs_style_chat, &g));
  RETURN_IF_ERROR(ReadStreamFields(r, &g));
  RETURN_IF_ERROR(ReadPromptLogprobs(r, limits, &g));
  RETURN_IF_ERROR(ReadVllmExtras(r, &g));
  RETURN_IF_ERROR(ReadResponseFormat(body, &g));
  if (g.max_tokens && g.min_tokens > *g.max_tokens) {
    return InvalidField(
        "min_tokens", absl::StrCat("'min_tokens' (", g.min_tokens, ") must be at most max_tokens (",
                                   *g.max_tokens, ")"));
  }
  if (g.min_tokens > 0 && g.constrained()) {
    return InvalidField(
        "min_tokens",
        "'min_tokens' together with a constrained output (response_format, "
        "guided_json, guided_choice, guided_regex, guided_grammar, structured_outputs) is not "
        "supported: the constraint decides where the output ends",
        "unsupported_value");
  }
  return g;
}

absl::StatusOr<Json> ParseJsonBody(std::string_view body) {
  if (!engine::IsValidUtf8(body)) {
    size_t offset = 0;
    while (offset < body.size()) {
      engine::Utf8Step step = engine::DecodeUtf8Step(body.substr(offset));
      if (step.status != engine::Utf8Status::kChar) break;
      offset += step.length;
    }
    return ApiErrorStatus(absl::StatusCode::kInvalidArgument,
                          absl::StrCat("request body is not valid UTF-8 (first bad byte at "
                                       "offset ",
                                       offset, ")"),
                          {}, "invalid_utf8");
  }
  absl::StatusOr<Json> parsed = ParseBoundedJson(body);
  if (!parsed.ok()) {
    if (IsJsonLimitError(parsed.status())) {
      // param: the top-level field the value is in ("model" of "model[0][0]…").
      const std::string path = JsonLimitPath(parsed.status());
      const std::string field = path.substr(0, path.find_first_of(".["));
      return ApiErrorStatus(absl::StatusCode::kInvalidArgument,
                            absl::StrCat("request body: ", parsed.status().message()), field,
                            "json_limit_exceeded");
    }
    return ApiErrorStatus(
        absl::StatusCode::kInvalidArgument,
        absl::StrCat("request body is not valid JSON: ", parsed.status().message()), {},
        "invalid_json");
  }
  Json json = *std::move(parsed);
  if (!json.is_object()) {
    return ApiErrorStatus(absl::StatusCode::kInvalidArgument, "request body must be a JSON object",
                          {}, "invalid_type");
  }
  return json;
}

std::vector<std::string_view> WithGenerationFields(std::initializer_list<std::string_view> own) {
  std::vector<std::string_view> fields(std::begin(kGenerationFields), std::end(kGenerationFields));
  fields.insert(fields.end(), own.begin(), own.end());
  return fields;
}

void NoteUnknownFields(const Json& body, const std::vector<std::string_view>& known) {
  // Names come from clients: the first kMaxLogged distinct ones are logged, then one line says
  // the rest are not (a body of 100,000 invented fields is not 100,000 log lines).
  constexpr size_t kMaxLogged = 256;
  static std::mutex mu;
  static std::set<std::string, std::less<>> logged;
  static bool said_enough = false;
  for (const auto& [key, value] : body.items()) {
    bool is_known = false;
    for (std::string_view k : known) is_known = is_known || k == key;
    if (is_known) continue;
    std::lock_guard<std::mutex> lock(mu);
    if (logged.size() >= kMaxLogged) {
      if (!std::exchange(said_enough, true)) {
        LOG_WARN("api", "more unknown request fields are ignored without a log line (after {})",
                 kMaxLogged);
      }
      return;
    }
    if (logged.insert(key).second) {
      LOG_WARN("api", "ignoring unknown request field '{}' (logged once)", key);
    }
  }
}

}  // namespace strata::frontend
