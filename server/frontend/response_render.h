// OpenAI response bodies and stream chunks, rendered from plain structs (docs/api.md, "REST" and
// "Streaming"). Pure functions; the SSE framing helpers are here too:
//   data: <json>\n\n   ...   data: [DONE]\n\n
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tool_call_parser.h"
#include "server/frontend/choice_decoder.h"

namespace strata::frontend {

using Json = nlohmann::ordered_json;

struct ResponseMeta {
  std::string id;       // "chatcmpl-…" or "cmpl-…"
  int64_t created = 0;  // unix seconds
  std::string model;    // the served model name
};

// A whole tool call of a non-streamed response.
struct ToolCall {
  std::string id;         // "functions.get_weather:0"
  std::string name;       // "get_weather"
  std::string arguments;  // JSON text as generated
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

// A finished choice of a non-streamed response.
struct FinalChoice {
  int index = 0;
  Json prompt_logprobs;  // PromptLogprobsJson when prompt_logprobs was asked for, else null
  std::string text;
  std::string reasoning;  // chat: reasoning_content (present in the message when not empty)
  std::vector<ToolCall> tool_calls;
  std::vector<TokenLogprobEntry> logprobs;
  // The entries of the tokens that wrote `text` (not reasoning or tool calls): /v1/responses'
  // output_text.logprobs.
  std::vector<TokenLogprobEntry> text_logprobs;
  bool logprobs_requested = false;
  std::string finish_reason;
  std::string stop_string;  // the stop string that ended it ("stop"), else empty
  // return_token_ids (vLLM): the prompt's ids (chat: the response's prompt_token_ids, from the
  // first choice) and the choice's generated ids, a final EOS or stop token included.
  std::optional<std::vector<int32_t>> prompt_token_ids;
  std::optional<std::vector<int32_t>> token_ids;
};

Json UsageJson(const Usage& usage);

// ---- prompt scores (vLLM's prompt_logprobs, completions' echo with logprobs) ----
// vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...], one
// entry per prompt token; each object holds the prompt token first, then the top `n` (those
// not the prompt token; rank = place among the most likely). `scores` are of prompt tokens 1...
Json PromptLogprobsJson(const engine::Tokenizer& tokenizer,
                        const std::vector<engine::TokenScore>& scores, int n);
// The echoed prompt as logprobs entries: the first token unscored, the others with their
// score and top `n`.
std::vector<TokenLogprobEntry> PromptLogprobEntries(int32_t first_token,
                                                    const std::vector<engine::TokenScore>& scores,
                                                    int n);

// ---- /v1/chat/completions ----
// {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]}
Json ChatLogprobsJson(const engine::Tokenizer& tokenizer,
                      const std::vector<TokenLogprobEntry>& entries);
// message.tool_calls of a chat.completion.
Json ToolCallsJson(const std::vector<ToolCall>& calls);
// delta.tool_calls of a chunk: {"index", then on a call's first delta "id", "type", and
// "function": {"name", "arguments"}; later deltas only {"index", "function": {"arguments"}}}.
Json ToolCallDeltasJson(const std::vector<engine::ToolCallDelta>& deltas);
// With prompt_logprobs, the first choice's become the response's `prompt_logprobs` (vLLM).
Json ChatCompletionJson(const ResponseMeta& meta, const engine::Tokenizer& tokenizer,
                        const std::vector<FinalChoice>& choices, const Usage& usage);
// One "chat.completion.chunk" with one choice. `delta` is an object ({"role": ...},
// {"content": ...}, {"tool_calls": [...]} or {}), `logprobs` null or ChatLogprobsJson.
Json ChatChunkJson(const ResponseMeta& meta, int index, Json delta, Json logprobs,
                   const std::optional<std::string>& finish_reason);

// ---- /v1/completions ----
// {"tokens", "token_logprobs", "top_logprobs" (token text -> logprob), "text_offset"};
// offsets start at `text_offset` and advance by each token's text length. An unscored entry
// (an echoed prompt's first token) has null log-prob and top_logprobs. Tokens of the same text
// share one top_logprobs key, holding the best of their logprobs.
Json CompletionLogprobsJson(const engine::Tokenizer& tokenizer,
                            const std::vector<TokenLogprobEntry>& entries, int64_t text_offset);
Json CompletionJson(const ResponseMeta& meta, const engine::Tokenizer& tokenizer,
                    const std::vector<FinalChoice>& choices, const Usage& usage);
Json CompletionChunkJson(const ResponseMeta& meta, int index, const std::string& text,
                         Json logprobs, const std::optional<std::string>& finish_reason);

// The usage chunk of a stream with include_usage: `choices: []` plus usage.
Json UsageChunkJson(const ResponseMeta& meta, std::string_view object, const Usage& usage);

// Compact JSON text of a body or event; ill-formed UTF-8 in strings (a token cut inside a
// character) becomes U+FFFD instead of an exception.
std::string JsonText(const Json& json);

// ---- SSE framing ----
std::string SseData(const Json& json);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
inline constexpr std::string_view kSsePing = ": ping\n\n";

}  // namespace strata::frontend
