// Kimi K3's generated XTML (docs/k3-format.md "Output") → reasoning_content, content and
// tool_calls, as the anchors' kimi_k3 parsers (vLLM, SGLang) read it.
//
// Input: the generated text detokenized with control tokens kept and nothing between them.
// Generation starts inside the channel the prompt opened:
//   thinking on:
//   REASONING<|close|>think<|sep|><|open|>response<|sep|>CONTENT<|close|>response<|sep|>
//                 [<|open|>tools<|sep|>CALL…<|close|>tools<|sep|>]<|close|>message<|sep|>
//   thinking off: CONTENT<|close|>response<|sep|>[tools channel]<|close|>message<|sep|>
// where CALL = <|open|>call tool="NAME" index="i"<|sep|>ARGUMENT…<|close|>call<|sep|> and
// ARGUMENT = <|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>.
//
// Rules:
// * Reasoning (thinking on): the text up to the first <|close|>think<|sep|>, after an
//   <|open|>think<|sep|> that starts the text; all of it when the channel never closed (then
//   there is no content). Markup inside the reasoning (a tools channel, say) stays reasoning.
//   Thinking off: no reasoning.
// * Content: the response channel's body. An <|open|>response<|sep|> before any content text
//   opens it explicitly, and then the body ends at <|close|>response<|sep|> (text after it is
//   not content). Without it (the prompt opened the channel) the markers <|close|>response<|sep|>,
//   <|close|>message<|sep|> and a later <|open|>response<|sep|> are removed and the text kept.
//   Content ends at the first <|open|>tools<|sep|>; text after the tools channel is dropped.
// * Tool calls (`tools`: tools were declared and tool_choice is not none): every complete call
//   block with a non-empty `tool` attribute in the first tools channel (up to its
//   <|close|>tools<|sep|> or the end). Attributes are key="value" with &quot; → " and
//   &amp; → & undone; a repeated attribute takes its last value. Arguments: each complete
//   argument block, its value typed by `type` (xtml_argument_value.h: missing or "string" →
//   the raw body, other types → JSON with a raw-string fallback); a repeated key keeps its first
//   place and its last value; `arguments` is the JSON object text ("{}" without arguments).
//   Incomplete calls are dropped, never shown as text. Without `tools` the tools channel is
//   dropped whole.
// * <|end_of_msg|> (K3's EOS) ends the output: nothing after it is read.
// * At the end of the text, a cut marker (a proper prefix of a marker that already holds its
//   <|open|> or <|close|> token, as max_tokens leaves it) is dropped, never shown.
//
// Streaming: text that may begin a marker is held back; each call is emitted whole (id, name,
// full arguments) once its <|close|>call<|sep|> arrives. For every way of splitting the text,
// the concatenated deltas of Add() plus Finish() equal ParseXtmlOutput() of the whole text.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tool_call_parser.h"

namespace strata::engine {

struct XtmlOutputOptions {
  bool thinking = true;  // the prompt opened the think channel (else the response channel)
  bool tools = false;    // tools declared and tool_choice not none: calls are parsed
  // Each call's id; null: RandomToolCallId().
  std::function<std::string()> new_call_id;
};

// One parse, or one streaming delta of it.
struct XtmlOutput {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;  // whole calls, in order
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// A checkpoint whose replies are XTML: a K3 one (UsesXtml, xtml_renderer.h) whose tokenizer has
// the control tokens, the checkpoints whose prompts the XTML renderer writes. A kimi_k3 config
// without the control tokens (a K2-style demo checkpoint) replies in its template's format.
bool RepliesInXtml(const Tokenizer& tokenizer);

// "chatcmpl-tool-<32 hex>" (random), as vLLM names a kimi_k3 call.
std::string RandomToolCallId();

XtmlOutput ParseXtmlOutput(std::string_view text, XtmlOutputOptions options);

class XtmlOutputStreamParser {
 public:
  explicit XtmlOutputStreamParser(XtmlOutputOptions options);

  // The part of the output that `text` made final.
  XtmlOutput Add(std::string_view text);
  // End of the text: whatever was held back and is not a cut marker.
  XtmlOutput Finish();

  int num_tool_calls() const { return num_tool_calls_; }

 private:
  enum class State { kThinkStart, kReasoning, kBody, kAfterResponse, kTools, kDone };

  void Step(bool end_of_stream, XtmlOutput* out);
  // One state's work on buffer_; false when it needs more text.
  bool StepThinkStart(bool end_of_stream);
  bool StepReasoning(XtmlOutput* out);
  bool StepBody(XtmlOutput* out);
  bool StepAfterResponse();
  bool StepTools(XtmlOutput* out);
  void EnterTools();
  // Emits buffer_ before the held-back tail that may begin one of `markers`.
  void EmitAllButMarkerPrefix(const std::vector<std::string_view>& markers, std::string* out);
  void EmitCall(std::string_view attributes, std::string_view body, XtmlOutput* out);

  XtmlOutputOptions options_;
  State state_;
  std::string buffer_;              // text not consumed yet
  bool explicit_response_ = false;  // the body opened with <|open|>response<|sep|>
  bool body_text_seen_ = false;     // content text was emitted
  // kTools: the current call's open and separator positions in buffer_ (npos: not found yet),
  // and how much of buffer_ earlier searches covered (they resume just before it).
  size_t call_open_;
  size_t call_sep_;
  size_t scanned_ = 0;
  int num_tool_calls_ = 0;
};

}  // namespace strata::engine
