// Kimi tool calls in generated text -> OpenAI `tool_calls`.
//
// Kimi writes calls as (the detokenizer must keep special tokens, skip_special_tokens=false,
// as vLLM sets for tool parsing):
//   CONTENT<|tool_calls_section_begin|>
//     <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>
//     ...
//   <|tool_calls_section_end|>
// Each call becomes {id: "functions.NAME:IDX", type: "function", function: {name: NAME,
// arguments: "{json}"}} — NAME is the id up to ':' after its last '.', arguments are the text
// between the markers with surrounding whitespace trimmed (as vLLM's kimi_k2 parser does).
// Content is the text before the section; text after the section end is dropped, and so is a
// call whose end marker never came (like vLLM). `<|tool_call_section_begin|>` is accepted too.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::engine {

struct ToolCall {
  std::string id;         // "functions.get_weather:0"
  std::string name;       // "get_weather"
  std::string arguments;  // JSON text as generated
};

struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> tool_calls;
};

ParsedToolCalls ParseKimiToolCalls(std::string_view text);

// One streaming update for a tool call: the first delta of call `index` carries id and name,
// later ones pieces of its arguments (OpenAI's chat.completion.chunk shape).
struct ToolCallDelta {
  int index = 0;
  std::optional<std::string> id;
  std::optional<std::string> name;
  std::string arguments;
};

struct ToolCallStreamDelta {
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
};

// Streaming form: feed text deltas; content is released as soon as it cannot be the start of
// a section marker, arguments as soon as they cannot be part of the end marker or trailing
// whitespace. Concatenating all deltas gives ParseKimiToolCalls() of the whole text for every
// way of splitting it (for a call cut off before its end marker, the stream has already
// released the part it saw).
class KimiToolCallStreamParser {
 public:
  ToolCallStreamDelta Add(std::string_view text);
  ToolCallStreamDelta Finish();
  bool saw_tool_calls() const { return state_ != State::kContent; }

 private:
  enum class State { kContent, kSection, kHeader, kArguments, kDone };
  void Step(bool end_of_stream, ToolCallStreamDelta* out);

  State state_ = State::kContent;
  std::string buffer_;
  int index_ = -1;
  bool arguments_started_ = false;
  std::string pending_space_;  // whitespace inside arguments not yet known to be interior
};

}  // namespace strata::engine
