#include "server/frontend/choice_decoder.h"

#include <algorithm>

#include "engine/tokenizer/utf8.h"

namespace strata::frontend {

std::string TokenText(const engine::Tokenizer& tokenizer, int32_t token_id) {
  std::optional<std::string_view> bytes = tokenizer.TokenBytes(token_id);
  if (!bytes) return "";
  return engine::SanitizeUtf8(*bytes);
}

std::vector<int> TokenBytes(const engine::Tokenizer& tokenizer, int32_t token_id) {
  std::vector<int> out;
  if (std::optional<std::string_view> bytes = tokenizer.TokenBytes(token_id)) {
    for (char c : *bytes) out.push_back(static_cast<unsigned char>(c));
  }
  return out;
}

ChoiceDecoder::ChoiceDecoder(const engine::Tokenizer& tokenizer, ChoiceOptions options)
    : options_(std::move(options)),
      detokenizer_(tokenizer, options_.detokenizer),
      in_reasoning_(options_.reasoning_open && options_.think_end_id >= 0) {
  if (options_.xtml) {
    xtml_.emplace(engine::XtmlOutputOptions{.thinking = options_.xtml_thinking,
                                            .tools = options_.parse_tool_calls});
  }
}

void ChoiceDecoder::AppendText(const std::string& text, ChoiceDelta* delta) {
  if (text.empty()) return;
  if (xtml_) {
    Take(xtml_->Add(text), delta);
    return;
  }
  if (in_reasoning_) {
    delta->reasoning += text;
    return;
  }
  if (!options_.parse_tool_calls) {
    delta->text += text;
    return;
  }
  Take(tool_calls_.Add(text), delta);
}

void ChoiceDecoder::Take(engine::ToolCallStreamDelta&& out, ChoiceDelta* delta) {
  delta->text += out.content;
  for (engine::ToolCallDelta& call : out.tool_calls) {
    num_tool_calls_ = std::max(num_tool_calls_, call.index + 1);
    delta->tool_calls.push_back(std::move(call));
  }
}

void ChoiceDecoder::Take(engine::XtmlOutput&& out, ChoiceDelta* delta) {
  delta->reasoning += out.reasoning;
  delta->text += out.content;
  for (engine::ToolCall& call : out.tool_calls) {
    engine::ToolCallDelta whole;
    whole.index = num_tool_calls_++;
    whole.id = std::move(call.id);
    whole.name = std::move(call.name);
    whole.arguments = std::move(call.arguments);
    delta->tool_calls.push_back(std::move(whole));
  }
}

void ChoiceDecoder::Flush(ChoiceDelta* delta) {
  AppendText(detokenizer_.Finish(), delta);
  if (xtml_) {
    Take(xtml_->Finish(), delta);
    return;
  }
  if (!options_.parse_tool_calls) return;
  Take(tool_calls_.Finish(), delta);
}

ChoiceDelta ChoiceDecoder::Apply(const server::StreamEvent& event) {
  ChoiceDelta delta;
  if (finished_) return delta;
  num_prompt_tokens_ = std::max(num_prompt_tokens_, event.num_prompt_tokens);
  num_cached_tokens_ = std::max(num_cached_tokens_, event.num_cached_tokens);
  num_output_tokens_ = std::max(num_output_tokens_, event.num_output_tokens);
  if (!event.error.ok()) {
    finished_ = true;
    delta.error = event.error;
    return delta;
  }
  const bool stopped_by_token = event.finish == server::FinishReason::kStop;
  delta.num_tokens = static_cast<int>(event.token_ids.size());
  for (size_t i = 0; i < event.token_ids.size(); ++i) {
    const int32_t id = event.token_ids[i];
    delta.token_ids.push_back(id);
    if (options_.logprobs) {
      TokenLogprobEntry entry;
      entry.token_id = id;
      if (i < event.logprobs.size()) entry.logprob = event.logprobs[i];
      if (i < event.top_logprobs.size()) entry.top = event.top_logprobs[i];
      delta.logprobs.push_back(std::move(entry));
    }
    const bool last = i + 1 == event.token_ids.size();
    if (last && stopped_by_token &&
        std::find(options_.hidden_stop_ids.begin(), options_.hidden_stop_ids.end(), id) !=
            options_.hidden_stop_ids.end()) {
      continue;
    }
    // Reasoning markers switch where the text goes and are not shown.
    const bool first = first_token_;
    first_token_ = false;
    if (first && id == options_.think_begin_id && options_.think_end_id >= 0) {
      in_reasoning_ = true;
      continue;
    }
    if (in_reasoning_ && id == options_.think_end_id) {
      // The reasoning ends here: an incomplete character (as U+FFFD) and held-back text are
      // the reasoning's, never the start of the answer.
      AppendText(detokenizer_.Finish(), &delta);
      in_reasoning_ = false;
      continue;
    }
    absl::StatusOr<std::string> text = detokenizer_.Add(id);
    if (text.ok()) AppendText(*text, &delta);  // an id outside the tokenizer shows nothing
    if (detokenizer_.stopped()) {
      finished_ = true;
      delta.stop_string_matched = true;
      delta.stop_string = options_.detokenizer.stop.at(*detokenizer_.stop_index());
      Flush(&delta);
      delta.finish_reason = num_tool_calls_ > 0 ? "tool_calls" : "stop";
      return delta;
    }
  }
  if (event.finish) {
    finished_ = true;
    Flush(&delta);
    delta.finish_reason = server::FinishReasonName(*event.finish);
    if (*event.finish == server::FinishReason::kStop && num_tool_calls_ > 0) {
      delta.finish_reason = "tool_calls";
    }
  }
  return delta;
}

ChoiceDelta ChoiceDecoder::Abort() {
  ChoiceDelta delta;
  if (finished_) return delta;
  finished_ = true;
  Flush(&delta);
  delta.finish_reason = "abort";
  return delta;
}

}  // namespace strata::frontend
