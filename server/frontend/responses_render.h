// /v1/responses bodies (OpenAI's Responses API), rendered from the same plain structs as chat
// (response_render.h). A response's `output` is a list of items: a `reasoning` item (the
// `<think>` text, as reasoning_text), a `message` item (output_text) and one `function_call`
// item per tool call, in the order the model wrote them.
//
// Stream: server-sent events with an `event:` line naming the type and a `sequence_number`:
//   response.created, response.in_progress,
//   per item: response.output_item.added, its deltas (response.reasoning_text.delta,
//     response.content_part.added + response.output_text.delta, or
//     response.function_call_arguments.delta), their .done events, response.output_item.done,
//   then response.completed (or response.incomplete when max_output_tokens cut it) carrying
//   the whole response; an error after the stream started is an `error` event.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "server/frontend/api_error.h"
#include "server/frontend/choice_decoder.h"
#include "server/frontend/choice_event_writer.h"
#include "server/frontend/response_render.h"

namespace strata::frontend {

// The Response object. `echo`: the request fields a response repeats (ResponsesRequest::echo);
// `status`: "in_progress" (output and usage still empty) or the choice's outcome. The message's
// output_text carries `logprobs` (chat's entries of the tokens that wrote the text) when the
// choice asked for them; `tokenizer` renders them.
Json ResponseObjectJson(const ResponseMeta& meta, const Json& echo, const FinalChoice* choice,
                        const Usage* usage, const engine::Tokenizer* tokenizer = nullptr);

// Writes one choice's stream (not thread-safe; one per response).
class ResponsesStreamWriter : public ChoiceEventWriter {
 public:
  // `logprobs_tokenizer`: non-null when the request asked for log-probabilities (every
  // output_text delta and done event carries them; an empty list otherwise).
  ResponsesStreamWriter(ResponseMeta meta, Json echo,
                        const engine::Tokenizer* logprobs_tokenizer = nullptr);

  std::string Start() override;
  std::string Delta(const ChoiceDelta& delta) override;
  // Closes the open item and sends the whole response (`choice` accumulated from the deltas).
  std::string Finish(const FinalChoice& choice, const Usage& usage) override;
  std::string Error(const ApiError& error) override;
  // ResponseObjectJson of the finished choice.
  Json FinalObject(const FinalChoice& choice, const Usage& usage) const override;

 private:
  enum class Item { kNone, kReasoning, kMessage, kCall };
  std::string Event(Json event);
  // An event about the open item: type, item_id, output_index (and content_index 0 but for
  // function calls).
  Json ItemEvent(std::string_view type) const;
  void Open(Item kind, Json item, std::string* out);
  void Close(std::string* out);

  const ResponseMeta meta_;
  const Json echo_;
  const engine::Tokenizer* logprobs_tokenizer_;
  Json text_logprobs_ = Json::array();  // the open message's, so far
  int64_t sequence_ = 0;
  int output_index_ = -1;
  Item open_ = Item::kNone;
  Json item_;         // the open item, as output_item.done will show it
  std::string text_;  // its text (or arguments) so far
};

}  // namespace strata::frontend
