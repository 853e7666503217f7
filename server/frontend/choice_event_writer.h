// The typed server-sent events of APIs that stream one choice as a sequence of named events
// (OpenAI's Responses API: responses_render.h; Anthropic's Messages API: messages_render.h),
// as opposed to chat / completions chunks. GenerationResponse feeds a writer the choice's
// deltas and sends what it returns.
#pragma once

#include <string>

#include "server/frontend/api_error.h"
#include "server/frontend/choice_decoder.h"
#include "server/frontend/response_render.h"

namespace strata::frontend {

class ChoiceEventWriter {
 public:
  virtual ~ChoiceEventWriter() = default;
  // The events that open the stream (before any token).
  virtual std::string Start() = 0;
  virtual std::string Delta(const ChoiceDelta& delta) = 0;
  // The closing events (`choice` accumulated from the deltas).
  virtual std::string Finish(const FinalChoice& choice, const Usage& usage) = 0;
  // An error after the stream started.
  virtual std::string Error(const ApiError& error) = 0;
  // The whole object a non-streamed request returns, and a finished stream carried.
  virtual Json FinalObject(const FinalChoice& choice, const Usage& usage) const = 0;
};

}  // namespace strata::frontend
