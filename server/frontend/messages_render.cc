// messages_render.h: Anthropic Message objects and their stream events.
#include "server/frontend/messages_render.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/json_limits.h"

namespace strata::frontend {
namespace {

std::string ErrorType(int http_status) {
  switch (http_status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return http_status < 500 ? "invalid_request_error" : "api_error";
  }
}

std::string StopReason(const FinalChoice& choice) {
  if (choice.finish_reason == "length") return "max_tokens";
  if (choice.finish_reason == "tool_calls" || !choice.tool_calls.empty()) return "tool_use";
  if (!choice.stop_string.empty()) return "stop_sequence";
  return "end_turn";  // EOS or a stop token id; an aborted choice never renders
}

// A tool call's arguments as the `input` object. Arguments that are not a JSON object (the
// model wrote something else, or JSON past core/json_limits.h's limits, which rendering it
// could not walk) are kept whole under "arguments" rather than dropped.
Json ToolInput(const std::string& arguments) {
  absl::StatusOr<Json> parsed = ParseBoundedJson(arguments);
  if (parsed.ok() && parsed->is_object()) return *std::move(parsed);
  if (arguments.empty()) return Json::object();
  return {{"arguments", arguments}};
}

Json MessagesUsageJson(const Usage& usage) {
  return {{"input_tokens", usage.prompt_tokens - usage.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", usage.cached_tokens},
          {"output_tokens", usage.completion_tokens}};
}

Json EmptyMessage(const ResponseMeta& meta) {
  return {{"id", meta.id},           {"type", "message"},        {"role", "assistant"},
          {"model", meta.model},     {"content", Json::array()}, {"stop_reason", nullptr},
          {"stop_sequence", nullptr}};
}

}  // namespace

Json AnthropicErrorJson(const ApiError& error) {
  return {{"type", "error"},
          {"error", {{"type", ErrorType(error.http_status)}, {"message", error.message}}}};
}

Json MessageObjectJson(const ResponseMeta& meta, const FinalChoice& choice, const Usage& usage) {
  Json message = EmptyMessage(meta);
  Json& content = message["content"];
  if (!choice.reasoning.empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", choice.reasoning}, {"signature", ""}});
  }
  if (!choice.text.empty() || (choice.tool_calls.empty() && choice.reasoning.empty())) {
    content.push_back({{"type", "text"}, {"text", choice.text}});
  }
  for (const ToolCall& call : choice.tool_calls) {
    content.push_back({{"type", "tool_use"},
                       {"id", call.id},
                       {"name", call.name},
                       {"input", ToolInput(call.arguments)}});
  }
  message["stop_reason"] = StopReason(choice);
  message["stop_sequence"] = choice.stop_string.empty() ? Json(nullptr) : Json(choice.stop_string);
  message["usage"] = MessagesUsageJson(usage);
  return message;
}

MessagesStreamWriter::MessagesStreamWriter(ResponseMeta meta, int64_t prompt_tokens)
    : meta_(std::move(meta)), prompt_tokens_(prompt_tokens) {}

std::string MessagesStreamWriter::Event(const Json& event) {
  return absl::StrCat("event: ", event["type"].get<std::string>(), "\ndata: ", JsonText(event),
                      "\n\n");
}

std::string MessagesStreamWriter::Start() {
  Json message = EmptyMessage(meta_);
  message["usage"] = {{"input_tokens", prompt_tokens_},
                      {"cache_creation_input_tokens", 0},
                      {"cache_read_input_tokens", 0},
                      {"output_tokens", 0}};
  return Event({{"type", "message_start"}, {"message", std::move(message)}}) +
         Event({{"type", "ping"}});
}

void MessagesStreamWriter::Open(Block kind, Json content_block, std::string* out) {
  Close(out);
  open_ = kind;
  ++index_;
  *out +=
      Event({{"type", "content_block_start"}, {"index", index_}, {"content_block", content_block}});
}

void MessagesStreamWriter::Close(std::string* out) {
  if (open_ == Block::kNone) return;
  if (open_ == Block::kThinking) {  // a thinking block ends with its (empty) signature
    *out += Event({{"type", "content_block_delta"},
                   {"index", index_},
                   {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  }
  *out += Event({{"type", "content_block_stop"}, {"index", index_}});
  open_ = Block::kNone;
}

std::string MessagesStreamWriter::Delta(const ChoiceDelta& d) {
  std::string out;
  auto delta = [&](Json body) {
    out += Event({{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(body)}});
  };
  if (!d.reasoning.empty()) {
    if (open_ != Block::kThinking) {
      Open(Block::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, &out);
    }
    delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}});
  }
  if (!d.text.empty()) {
    if (open_ != Block::kText) Open(Block::kText, {{"type", "text"}, {"text", ""}}, &out);
    delta({{"type", "text_delta"}, {"text", d.text}});
  }
  for (const engine::ToolCallDelta& call : d.tool_calls) {
    if (call.id || call.name || open_ != Block::kToolUse) {
      Open(Block::kToolUse,
           {{"type", "tool_use"},
            {"id", call.id.value_or("")},
            {"name", call.name.value_or("")},
            {"input", Json::object()}},
           &out);
    }
    if (!call.arguments.empty()) {
      delta({{"type", "input_json_delta"}, {"partial_json", call.arguments}});
    }
  }
  return out;
}

std::string MessagesStreamWriter::Finish(const FinalChoice& choice, const Usage& usage) {
  std::string out;
  // A reply with no block at all still shows one (empty) text block, as the object does.
  if (index_ < 0) Open(Block::kText, {{"type", "text"}, {"text", ""}}, &out);
  Close(&out);
  const Json message = FinalObject(choice, usage);
  out += Event(
      {{"type", "message_delta"},
       {"delta",
        {{"stop_reason", message["stop_reason"]}, {"stop_sequence", message["stop_sequence"]}}},
       {"usage", message["usage"]}});
  out += Event({{"type", "message_stop"}});
  return out;
}

std::string MessagesStreamWriter::Error(const ApiError& error) {
  return Event(AnthropicErrorJson(error));
}

Json MessagesStreamWriter::FinalObject(const FinalChoice& choice, const Usage& usage) const {
  return MessageObjectJson(meta_, choice, usage);
}

}  // namespace strata::frontend
