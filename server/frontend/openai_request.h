// The OpenAI request bodies Strata accepts, parsed and validated into plain structs (docs/api.md,
// "REST"). Parsing needs no tokenizer or engine: token-level checks (context length, ids in
// the vocabulary) happen when the request is built for the engine (generation_request.h).
//
// Shared by /v1/chat/completions and /v1/completions (GenerationFields): stream,
// stream_options.include_usage, max_tokens / max_completion_tokens, temperature, top_p, top_k,
// min_p, presence / frequency / repetition penalty, stop, stop_token_ids, seed, n, logit_bias,
// ignore_eos, min_tokens, skip_special_tokens, include_stop_str_in_output, priority, request_id,
// cache_salt, prompt_logprobs, allowed_token_ids, bad_words, truncate_prompt_tokens,
// stream_options.continuous_usage_stats, response_format (text, json_object,
// json_schema), best_of (= n only), use_beam_search (false only), user (accepted, ignored).
// Unknown fields are ignored (and logged once per name: NoteUnknownFields).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/sampling.h"
#include "engine/structured/gbnf.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/tool_call_constraint.h"

namespace strata::frontend {

using Json = nlohmann::ordered_json;

// Sampling defaults for the fields a request leaves out (vLLM's --generation-config: the
// model's generation_config.json, generation_config.h); absent ones are OpenAI's defaults.
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int64_t> max_tokens;  // max_new_tokens: capped by the context left
};

// Limits that depend on the served model and the server's flags.
struct RequestLimits {
  int64_t vocab_size = 0;  // token ids (stop_token_ids, logit_bias, prompts) are < this
  int max_logprobs = 20;   // top_logprobs / logprobs / prompt_logprobs at most (--max-logprobs)
  GenerationDefaults defaults;  // the served model's (ServedModel::generation_config)
  int max_n = 128;
  int max_stop_strings = 64;
  int max_stop_chars = 1024;  // per stop string
};

// The largest token count a request field may name (max_tokens, min_tokens, budgets).
inline constexpr int64_t kMaxTokensLimit = int64_t{1} << 31;

struct GenerationFields {
  std::string model;                  // may be empty (the served model is used)
  engine::SamplingParams sampling;    // OpenAI defaults: temperature 1, top_p 1
  std::optional<int64_t> max_tokens;  // absent: up to the context length
  int n = 1;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  std::vector<int32_t> allowed_token_ids;  // vLLM: non-empty = sample only these
  std::vector<std::string> bad_words;      // vLLM: never complete these (TokenFilters)
  bool ignore_eos = false;
  int64_t min_tokens = 0;  // vLLM: no EOS, stop id or stop string before this many tokens
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  // vLLM's return_token_ids: the prompt's and each choice's token ids next to the text (the
  // ids a client resends to continue exactly, with no re-tokenization).
  bool return_token_ids = false;
  int priority = 0;
  std::string request_id;  // client-chosen id (vLLM); empty: generated
  // request_id came from the X-Request-Id header (the body had none): a proxy's retry may reuse
  // it while the first attempt still runs, so the engine's ids are made unique instead of
  // refusing the request.
  bool request_id_from_header = false;
  std::string cache_salt;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // vLLM's stream_options.continuous_usage_stats: every chunk carries its choice's usage so far.
  bool continuous_usage = false;
  // llama.cpp's return_progress (stream only): chunks with prompt_progress while prefilling.
  bool return_progress = false;
  // vLLM's truncate_prompt_tokens: keep only the last k prompt tokens (−1: as many as the
  // context allows, leaving room for one output token). Absent: a prompt too long is a 400.
  std::optional<int64_t> truncate_prompt_tokens;
  int num_logprobs = -1;  // >= 0: return logprobs with this many alternatives
  // vLLM's prompt_logprobs: >= 0 returns the log-probability and rank of every prompt token
  // after the first, with this many alternatives (not with stream: true).
  int prompt_logprobs = -1;
  // response_format json_object / json_schema: the output must be JSON this grammar accepts
  // (compiled once per request, shared by its choices); null: free text.
  std::shared_ptr<const structured::JsonGrammar> json_grammar;
  // guided_grammar / structured_outputs.grammar / grammar / ebnf: the output must be a `root`
  // of this GBNF grammar; null: none. At most one of json_grammar and cfg_grammar is set.
  std::shared_ptr<const structured::CfgGrammar> cfg_grammar;

  // The output follows a grammar (JSON, a regex, a choice or GBNF).
  bool constrained() const { return json_grammar != nullptr || cfg_grammar != nullptr; }
};

// none: tools are not called; auto: the model decides; required: at least one call (to any
// tool); named: exactly one call to `tool_choice_name`. required and named are enforced by a
// sampling constraint (engine/structured/tool_call_constraint.h).
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatCompletionRequest {
  GenerationFields gen;
  Json messages = Json::array();  // validated; shapes as the chat template expects them
  Json tools;                     // null or a validated array of function tools
  ToolChoice tool_choice = ToolChoice::kAuto;
  bool parallel_tool_calls = true;
  // required / named: the tools a call may name, their parameters compiled (in `tools` order).
  std::vector<structured::ToolSpec> forced_tools;
  bool add_generation_prompt = true;
  // vLLM's continue_final_message: the prompt ends inside the final message (no end-of-turn,
  // no generation prompt) and the reply continues it; final_message_text is its content.
  bool continue_final_message = false;
  std::string final_message_text;
  Json chat_template_kwargs;  // null or an object (with reasoning_effort, when set, in it)
  // vLLM's top-level `reasoning_effort` (also put into chat_template_kwargs, as vLLM does).
  std::optional<std::string> reasoning_effort;
  // vLLM's `thinking_token_budget`: at most this many tokens of reasoning, then the reasoning's
  // close is forced and the answer follows (engine/structured/thinking_budget.h). Only when the
  // prompt opened the reasoning; absent: no cap.
  std::optional<int64_t> thinking_token_budget;
  // `response_format` as sent (null when absent): a Kimi K3 prompt describes it.
  Json response_format;
  // vLLM's `echo`: the final message's text when it has the reply's role (the assistant's, or
  // any with add_generation_prompt false); the reply's content starts with it. Else empty.
  std::string echo_text;
};

// /v1/responses (OpenAI's Responses API): the chat request it means, and the request fields
// the Response object repeats (instructions, max_output_tokens, tools, text, ...).
struct ResponsesRequest {
  ChatCompletionRequest chat;
  Json echo = Json::object();
  // `store` (OpenAI's default: true) and the conversation through this request's input as chat
  // messages (previous_response_id's history first, `instructions` left out): what a later
  // request naming this response continues from (response_store.h).
  bool store = true;
  Json conversation = Json::array();
  // OpenAI's background mode: answered at once, generated after (background_responses.h).
  bool background = false;
  // This request's `input` as Responses items (GET /v1/responses/{id}/input_items): a string as
  // one user message, a message's string content as one input_text (output_text for the
  // assistant's) part, "type" and a message's "status" filled in; ids as the client gave them.
  Json input_items = Json::array();
};

// One prompt of /v1/completions: text or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;  // when `text` is absent
};

struct CompletionRequest {
  GenerationFields gen;
  std::vector<PromptInput> prompts;  // one choice group per prompt (n choices each)
  // The prompt is shown before the text; with logprobs, its tokens lead the logprobs (the
  // first one null). max_tokens 0 is allowed with echo: the prompt alone is scored.
  bool echo = false;
};

// Parse a whole request body (errors are 400s naming the field, api_error.h).
absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(const Json& body,
                                                                 const RequestLimits& limits);
absl::StatusOr<CompletionRequest> ParseCompletionRequest(const Json& body,
                                                         const RequestLimits& limits);
// input (a string or message / function_call / function_call_output items), instructions,
// max_output_tokens, tools (function tools), tool_choice, text.format, reasoning.effort
// (thinking on), store and the sampling fields; `history` (the stored conversation a
// previous_response_id names, looked up by the caller; else empty) comes before the input.
// conversation and background are 400s. Errors name the Responses fields.
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(const Json& body,
                                                       const RequestLimits& limits,
                                                       const Json& history = Json::array());

// The shared fields (exposed for tests). `logprobs_style_chat`: chat's `logprobs: bool` +
// `top_logprobs: int`; else completions' `logprobs: int`.
absl::StatusOr<GenerationFields> ParseGenerationFields(const Json& body,
                                                       const RequestLimits& limits,
                                                       bool logprobs_style_chat);

// response_format: text (no constraint), json_object (any object) or json_schema (its schema
// compiled; a schema the grammar cannot enforce is a 400 naming the keyword and where it is).
absl::Status ReadResponseFormat(const Json& body, GenerationFields* g);

// A JSON Schema (an object, or its JSON text) at request field `param`, compiled; a 400 naming
// `param` (and the schema's own JSON pointer) when it is not JSON or cannot be enforced.
absl::StatusOr<std::shared_ptr<const structured::JsonGrammar>> CompileSchemaField(
    const Json& schema, const std::string& param);

// Parses the body text as JSON: 400 `invalid_json` naming the position, or `invalid_utf8`,
// or `invalid_type` when the top level is not an object.
absl::StatusOr<Json> ParseJsonBody(std::string_view body);

// The fields ParseGenerationFields reads (chat and completions share them; one list, kept next
// to the code that reads them), then `own`: an endpoint's known fields for NoteUnknownFields.
std::vector<std::string_view> WithGenerationFields(std::initializer_list<std::string_view> own);

// Logs a request field Strata does not know, once per field name for the process. Such a field
// is accepted and has no effect, as vLLM does with the fields it does not know (it logs them);
// a known field Strata cannot honour is a 400 naming it instead (best_of other than n,
// use_beam_search, a request's chat_template, suffix).
void NoteUnknownFields(const Json& body, const std::vector<std::string_view>& known);

}  // namespace strata::frontend
