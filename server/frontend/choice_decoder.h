// One choice of a completion, from engine events to what the client sees:
//
//   StreamEvent (token ids, logprobs, finish) ──► IncrementalDetokenizer (stop strings)
//        ──► KimiToolCallStreamParser (tools on) ──► ChoiceDelta {text, tool calls, logprobs,
//                                                               finish_reason}
//
// A Kimi K3 reply (ChoiceOptions::xtml) goes through engine::XtmlOutputStreamParser instead:
// reasoning, content and tool calls (each whole, in one delta) from its XTML channels.
//
// finish_reason: "stop" (EOS, a stop token id or a stop string), "length", "tool_calls" (the
// generation stopped and produced at least one tool call), "abort" (cancelled or shut down).
// The EOS / stop token that ended a choice is counted but not shown (as vLLM does). A stop
// string ends the choice at once: the caller must then cancel the engine request
// (ChoiceDelta::stop_string_matched) and later events are ignored. Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/step.h"
#include "engine/tokenizer/detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tool_call_parser.h"
#include "engine/tokenizer/xtml_output_parser.h"
#include "server/request_stream.h"

namespace strata::frontend {

struct ChoiceOptions {
  engine::DetokenizerOptions detokenizer;  // skip_special_tokens, stop strings
  bool parse_tool_calls = false;           // needs detokenizer.skip_special_tokens == false
  bool logprobs = false;                   // collect TokenLogprobEntry per token
  std::vector<int32_t> hidden_stop_ids;    // EOS and stop token ids: not shown when they end it
  // Reasoning (docs/api.md: `<think>` … `</think>` returned as reasoning_content), split on the
  // marker token ids (−1: the model has none). The reply reasons when the prompt opened
  // `<think>` (`reasoning_open`) or when its first token is `<think>`; everything up to
  // `</think>` (or the end) is reasoning, the rest content. The markers are never shown.
  int32_t think_begin_id = -1;
  int32_t think_end_id = -1;
  bool reasoning_open = false;
  // Kimi K3 (docs/k3-format.md "Output"): the reply is XTML, split into reasoning, content and
  // tool calls (parsed when parse_tool_calls) by engine::XtmlOutputStreamParser; needs
  // detokenizer.skip_special_tokens == false. xtml_thinking: the prompt opened the think channel
  // (else the response channel).
  bool xtml = false;
  bool xtml_thinking = false;
};

struct TokenLogprobEntry {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<engine::TokenLogprob> top;  // most likely first
  bool scored = true;  // false: an echoed prompt's first token (log-prob and top are null)
};

struct ChoiceDelta {
  std::string text;
  std::string reasoning;                          // chat: reasoning_content
  std::vector<engine::ToolCallDelta> tool_calls;  // the first delta of a call has id and name
  std::vector<TokenLogprobEntry> logprobs;        // one per token consumed by this delta
  std::vector<int32_t> token_ids;                 // the generated tokens it consumed
  // Generated tokens this delta consumed, shown or not: a token can show nothing yet (the first
  // bytes of a character, text held back for a stop string, a marker or special token), and a
  // stream still sends a chunk for it, as vLLM does, so clients see every engine step.
  int num_tokens = 0;
  std::optional<std::string> finish_reason;
  absl::Status error;  // the engine rejected or failed the request
  bool stop_string_matched = false;
  std::string stop_string;  // which one, when stop_string_matched
  bool empty() const {
    return text.empty() && reasoning.empty() && tool_calls.empty() && logprobs.empty() &&
           !finish_reason && error.ok();
  }
};

class ChoiceDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  ChoiceDecoder(const engine::Tokenizer& tokenizer, ChoiceOptions options);

  // Applies one event; events after the end are ignored (an empty delta).
  ChoiceDelta Apply(const server::StreamEvent& event);
  // Ends the choice from outside (cancelled before the engine said so): finish "abort".
  ChoiceDelta Abort();

  bool finished() const { return finished_; }
  int64_t num_prompt_tokens() const { return num_prompt_tokens_; }
  int64_t num_cached_tokens() const { return num_cached_tokens_; }
  int64_t num_output_tokens() const { return num_output_tokens_; }
  int num_tool_calls() const { return num_tool_calls_; }

 private:
  void AppendText(const std::string& text, ChoiceDelta* delta);
  void Flush(ChoiceDelta* delta);
  void Take(engine::ToolCallStreamDelta&& out, ChoiceDelta* delta);
  void Take(engine::XtmlOutput&& out, ChoiceDelta* delta);

  ChoiceOptions options_;
  engine::IncrementalDetokenizer detokenizer_;
  engine::KimiToolCallStreamParser tool_calls_;
  std::optional<engine::XtmlOutputStreamParser> xtml_;  // options_.xtml
  int num_tool_calls_ = 0;
  bool in_reasoning_ = false;
  bool first_token_ = true;
  bool finished_ = false;
  int64_t num_prompt_tokens_ = 0;
  int64_t num_cached_tokens_ = 0;
  int64_t num_output_tokens_ = 0;
};

// Printable text of one token (its bytes with ill-formed UTF-8 replaced) and its raw bytes.
std::string TokenText(const engine::Tokenizer& tokenizer, int32_t token_id);
std::vector<int> TokenBytes(const engine::Tokenizer& tokenizer, int32_t token_id);

}  // namespace strata::frontend
