// Anthropic's Messages API (/v1/messages) bodies, rendered from the same plain structs as chat
// (response_render.h). A message's `content` is a list of blocks in the order the model wrote
// them: a `thinking` block (the `<think>` text; its `signature` empty: nothing is signed here),
// a `text` block, one `tool_use` block per tool call (`input`: the call's arguments parsed as
// JSON). stop_reason: end_turn, stop_sequence (with stop_sequence), max_tokens, tool_use.
// usage: input_tokens (the prompt tokens not read from the prefix cache),
// cache_read_input_tokens, cache_creation_input_tokens (0), output_tokens.
//
// Stream: server-sent events with an `event:` line naming the type:
//   message_start (the message with empty content), ping,
//   per block: content_block_start, content_block_delta (text_delta, thinking_delta then a
//     signature_delta, input_json_delta), content_block_stop,
//   message_delta (stop_reason, stop_sequence, usage), message_stop;
//   an error after the stream started is an `error` event (AnthropicErrorJson).
#pragma once

#include <cstdint>
#include <string>

#include "server/frontend/api_error.h"
#include "server/frontend/choice_decoder.h"
#include "server/frontend/choice_event_writer.h"
#include "server/frontend/response_render.h"

namespace strata::frontend {

// {"type": "error", "error": {"type": ..., "message": ...}}: the error types by HTTP status
// (invalid_request_error 400, authentication_error 401, permission_error 403, not_found_error
// 404, request_too_large 413, rate_limit_error 429, api_error 500, overloaded_error 503).
Json AnthropicErrorJson(const ApiError& error);

// The Message object of a finished choice.
Json MessageObjectJson(const ResponseMeta& meta, const FinalChoice& choice, const Usage& usage);

class MessagesStreamWriter : public ChoiceEventWriter {
 public:
  // `prompt_tokens`: message_start's input_tokens (the cache hit is not known yet).
  MessagesStreamWriter(ResponseMeta meta, int64_t prompt_tokens);

  std::string Start() override;
  std::string Delta(const ChoiceDelta& delta) override;
  std::string Finish(const FinalChoice& choice, const Usage& usage) override;
  std::string Error(const ApiError& error) override;
  Json FinalObject(const FinalChoice& choice, const Usage& usage) const override;

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };
  static std::string Event(const Json& event);
  void Open(Block kind, Json content_block, std::string* out);
  void Close(std::string* out);

  const ResponseMeta meta_;
  const int64_t prompt_tokens_;
  int index_ = -1;  // the open (or last) block's
  Block open_ = Block::kNone;
};

}  // namespace strata::frontend
