// responses_render.h: Response objects and their stream events.
#include "server/frontend/responses_render.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace strata::frontend {
namespace {

// Item ids derive from the response id: "<kind>_<response id>_<output index>".
std::string ItemId(const ResponseMeta& meta, absl::string_view kind, int index) {
  return absl::StrCat(kind, "_", meta.id, "_", index);
}

Json ReasoningItem(const ResponseMeta& meta, int index, const std::string& text) {
  return {{"id", ItemId(meta, "rs", index)},
          {"type", "reasoning"},
          {"summary", Json::array()},
          {"content", {{{"type", "reasoning_text"}, {"text", text}}}}};
}

Json OutputText(const std::string& text, Json logprobs = Json::array()) {
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", Json::array()},
          {"logprobs", std::move(logprobs)}};
}

Json MessageItem(const ResponseMeta& meta, int index, const std::string& text,
                 std::string_view status, Json logprobs = Json::array()) {
  return {{"id", ItemId(meta, "msg", index)},
          {"type", "message"},
          {"status", status},
          {"role", "assistant"},
          {"content", {OutputText(text, std::move(logprobs))}}};
}

// Chat's logprobs entries ({token, logprob, bytes, top_logprobs}) as a Responses list.
Json LogprobsList(const engine::Tokenizer* tokenizer,
                  const std::vector<TokenLogprobEntry>& entries) {
  if (tokenizer == nullptr) return Json::array();
  return ChatLogprobsJson(*tokenizer, entries)["content"];
}

Json CallItem(const ResponseMeta& meta, int index, const ToolCall& call, std::string_view status) {
  return {{"id", ItemId(meta, "fc", index)},
          {"type", "function_call"},
          {"status", status},
          {"call_id", call.id},
          {"name", call.name},
          {"arguments", call.arguments}};
}

Json ResponsesUsageJson(const Usage& usage) {
  return {{"input_tokens", usage.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
          {"output_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

}  // namespace

Json ResponseObjectJson(const ResponseMeta& meta, const Json& echo, const FinalChoice* choice,
                        const Usage* usage, const engine::Tokenizer* tokenizer) {
  std::string status = "in_progress";
  Json incomplete = nullptr;
  Json output = Json::array();
  if (choice != nullptr) {
    status = "completed";
    if (choice->finish_reason == "length") {
      status = "incomplete";
      incomplete = {{"reason", "max_output_tokens"}};
    } else if (choice->finish_reason == "abort") {
      status = "cancelled";
    }
    if (!choice->reasoning.empty()) {
      output.push_back(ReasoningItem(meta, static_cast<int>(output.size()), choice->reasoning));
    }
    // A reply that is only tool calls has no message item.
    if (!choice->text.empty() || choice->tool_calls.empty()) {
      output.push_back(MessageItem(
          meta, static_cast<int>(output.size()), choice->text,
          status == "incomplete" ? "incomplete" : "completed",
          LogprobsList(choice->logprobs_requested ? tokenizer : nullptr, choice->text_logprobs)));
    }
    for (const ToolCall& call : choice->tool_calls) {
      output.push_back(CallItem(meta, static_cast<int>(output.size()), call, "completed"));
    }
  }
  Json out = {{"id", meta.id},
              {"object", "response"},
              {"created_at", meta.created},
              {"status", status},
              {"error", nullptr},
              {"incomplete_details", std::move(incomplete)},
              {"model", meta.model},
              {"output", std::move(output)}};
  for (const auto& [key, value] : echo.items()) out[key] = value;
  out["usage"] = usage != nullptr ? ResponsesUsageJson(*usage) : Json(nullptr);
  return out;
}

ResponsesStreamWriter::ResponsesStreamWriter(ResponseMeta meta, Json echo,
                                             const engine::Tokenizer* logprobs_tokenizer)
    : meta_(std::move(meta)), echo_(std::move(echo)), logprobs_tokenizer_(logprobs_tokenizer) {}

std::string ResponsesStreamWriter::Event(Json event) {
  event["sequence_number"] = sequence_++;
  const std::string type = event["type"].get<std::string>();
  return absl::StrCat("event: ", type, "\ndata: ", JsonText(event), "\n\n");
}

std::string ResponsesStreamWriter::Start() {
  const Json response = ResponseObjectJson(meta_, echo_, nullptr, nullptr);
  std::string out = Event({{"type", "response.created"}, {"response", response}});
  out += Event({{"type", "response.in_progress"}, {"response", response}});
  return out;
}

void ResponsesStreamWriter::Open(Item kind, Json item, std::string* out) {
  Close(out);
  open_ = kind;
  ++output_index_;
  item_ = std::move(item);
  text_.clear();
  text_logprobs_ = Json::array();
  Json added = item_;
  if (kind == Item::kReasoning) added["content"] = Json::array();
  if (kind == Item::kMessage) added["content"] = Json::array();
  *out += Event({{"type", "response.output_item.added"},
                 {"output_index", output_index_},
                 {"item", std::move(added)}});
  if (kind == Item::kMessage) {
    Json part = ItemEvent("response.content_part.added");
    part["part"] = OutputText("");
    *out += Event(std::move(part));
  }
}

Json ResponsesStreamWriter::ItemEvent(std::string_view type) const {
  Json e = {{"type", type}, {"item_id", item_["id"]}, {"output_index", output_index_}};
  if (open_ != Item::kCall) e["content_index"] = 0;
  return e;
}

void ResponsesStreamWriter::Close(std::string* out) {
  if (open_ == Item::kNone) return;
  Json done;
  switch (open_) {
    case Item::kReasoning:
      done = ItemEvent("response.reasoning_text.done");
      done["text"] = text_;
      item_["content"][0]["text"] = text_;
      break;
    case Item::kMessage:
      done = ItemEvent("response.output_text.done");
      done["text"] = text_;
      done["logprobs"] = text_logprobs_;
      *out += Event(std::move(done));
      done = ItemEvent("response.content_part.done");
      done["part"] = OutputText(text_, text_logprobs_);
      item_["content"][0] = OutputText(text_, text_logprobs_);
      item_["status"] = "completed";
      break;
    default:  // a function call
      done = ItemEvent("response.function_call_arguments.done");
      done["arguments"] = text_;
      item_["arguments"] = text_;
      item_["status"] = "completed";
      break;
  }
  *out += Event(std::move(done));
  *out += Event(
      {{"type", "response.output_item.done"}, {"output_index", output_index_}, {"item", item_}});
  open_ = Item::kNone;
}

std::string ResponsesStreamWriter::Delta(const ChoiceDelta& d) {
  std::string out;
  auto append = [&](const char* type, const std::string& delta, Json logprobs = nullptr) {
    text_ += delta;
    Json e = ItemEvent(type);
    e["delta"] = delta;
    if (!logprobs.is_null()) e["logprobs"] = std::move(logprobs);
    out += Event(std::move(e));
  };
  if (!d.reasoning.empty()) {
    if (open_ != Item::kReasoning) {
      Open(Item::kReasoning, ReasoningItem(meta_, output_index_ + 1, ""), &out);
    }
    append("response.reasoning_text.delta", d.reasoning);
  }
  if (!d.text.empty()) {
    if (open_ != Item::kMessage) {
      Open(Item::kMessage, MessageItem(meta_, output_index_ + 1, "", "in_progress"), &out);
    }
    Json logprobs = LogprobsList(logprobs_tokenizer_, d.logprobs);
    for (const Json& entry : logprobs) text_logprobs_.push_back(entry);
    append("response.output_text.delta", d.text, std::move(logprobs));
  }
  for (const engine::ToolCallDelta& call : d.tool_calls) {
    if (call.id || call.name || open_ != Item::kCall) {
      ToolCall whole{call.id.value_or(""), call.name.value_or(""), ""};
      Open(Item::kCall, CallItem(meta_, output_index_ + 1, whole, "in_progress"), &out);
    }
    if (!call.arguments.empty()) append("response.function_call_arguments.delta", call.arguments);
  }
  return out;
}

Json ResponsesStreamWriter::FinalObject(const FinalChoice& choice, const Usage& usage) const {
  return ResponseObjectJson(meta_, echo_, &choice, &usage, logprobs_tokenizer_);
}

std::string ResponsesStreamWriter::Finish(const FinalChoice& choice, const Usage& usage) {
  std::string out;
  Close(&out);
  Json response = FinalObject(choice, usage);
  const bool incomplete = response["status"] == "incomplete";
  out += Event({{"type", incomplete ? "response.incomplete" : "response.completed"},
                {"response", std::move(response)}});
  return out;
}

std::string ResponsesStreamWriter::Error(const ApiError& error) {
  return Event({{"type", "error"},
                {"code", error.code},
                {"message", error.message},
                {"param", error.param ? Json(*error.param) : Json()}});
}

}  // namespace strata::frontend
