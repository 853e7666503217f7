// One event of an OpenAI-style completions / chat stream, as the load generator times it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace strata::bench_serve {

struct StreamChunk {
  // The chunk carries a generation step: some choice has generated text (completions `text`,
  // chat `delta.content` / `reasoning_content` / `tool_calls`), possibly empty — a token that
  // shows no text yet (a special token, part of a character) is still a step, as vLLM's
  // benchmark counts it. Not a step: a chat choice's opening `role` chunk, a chunk that only
  // ends a choice (`finish_reason` set, no text), the usage chunk (`choices: []`). TTFT is the
  // time to the first step, ITL the gaps between steps.
  bool step = false;
  std::optional<std::string> error;  // an error event, or an event that is not a JSON object
  std::optional<int64_t> prompt_tokens, completion_tokens;  // from `usage`, when present
};

// `data`: the text after `data: ` of one server-sent event (not "[DONE]").
StreamChunk ParseStreamChunk(const std::string& data);

// The message of an OpenAI-style error body ({"error": {"message": …}}), else its first 300
// bytes.
std::string ErrorMessage(const std::string& body);

}  // namespace strata::bench_serve
