// ParseMessagesRequest (messages_request.h).
#include "server/frontend/messages_request.h"

#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "server/frontend/api_error.h"
#include "server/frontend/json_fields.h"

namespace strata::frontend {
namespace {

// Fields that mean the same in the chat body: copied as they are.
constexpr std::string_view kMessagesSameAsChat[] = {"model", "stream", "temperature", "top_p",
                                                    "top_k"};

const std::vector<std::string_view>& MessagesFields() {
  static const std::vector<std::string_view> fields = [] {
    std::vector<std::string_view> f(std::begin(kMessagesSameAsChat), std::end(kMessagesSameAsChat));
    for (std::string_view name : {"messages", "system", "max_tokens", "stop_sequences", "tools",
                                  "tool_choice", "thinking", "metadata", "service_tier"}) {
      f.push_back(name);
    }
    return f;
  }();
  return fields;
}

absl::Status UnsupportedField(std::string_view param, std::string_view why) {
  return InvalidField(
      param, absl::StrCat("'", std::string(param), "' is not supported: ", std::string(why)),
      "unsupported_value");
}

// A string field of a block, or a 400 naming it.
absl::StatusOr<Json> StringAt(const Json& block, const char* key, const std::string& at) {
  auto it = block.find(key);
  if (it == block.end() || !it->is_string()) {
    return InvalidType(absl::StrCat(at, ".", key), "a string");
  }
  return *it;
}

// An image block's source → a chat image_url part (data: URL for base64 sources).
absl::StatusOr<Json> ChatImagePart(const Json& block, const std::string& at) {
  auto source = block.find("source");
  if (source == block.end() || !source->is_object()) {
    return InvalidType(at + ".source", "an object");
  }
  const std::string type = source->value("type", "");
  if (type == "base64") {
    ASSIGN_OR_RETURN(Json media, StringAt(*source, "media_type", at + ".source"));
    ASSIGN_OR_RETURN(Json data, StringAt(*source, "data", at + ".source"));
    return Json{{"type", "image_url"},
                {"image_url",
                 {{"url", absl::StrCat("data:", media.get<std::string>(), ";base64,",
                                       data.get<std::string>())}}}};
  }
  if (type == "url") {
    ASSIGN_OR_RETURN(Json url, StringAt(*source, "url", at + ".source"));
    return Json{{"type", "image_url"}, {"image_url", {{"url", url}}}};
  }
  return InvalidField(at + ".source.type", absl::StrCat("unsupported image source type '", type,
                                                        "' (expected base64 or url)"));
}

// A text or image block → its chat content part; nullopt for any other type.
absl::StatusOr<std::optional<Json>> ContentPart(const Json& block, const std::string& type,
                                                const std::string& at) {
  if (type == "text") {
    ASSIGN_OR_RETURN(Json text, StringAt(block, "text", at));
    return Json{{"type", "text"}, {"text", text}};
  }
  if (type == "image") return ChatImagePart(block, at);
  return std::nullopt;
}

// A tool_result's content (a string, or text / image blocks) → chat tool message content.
absl::StatusOr<Json> ToolResultContent(const Json& block, const std::string& at) {
  auto content = block.find("content");
  if (content == block.end() || content->is_null()) return Json("");
  if (content->is_string()) return *content;
  if (!content->is_array()) return InvalidType(at + ".content", "a string or an array of blocks");
  Json parts = Json::array();
  for (size_t k = 0; k < content->size(); ++k) {
    const Json& part = (*content)[k];
    const std::string part_at = absl::StrCat(at, ".content[", k, "]");
    const std::string type = StringOr(part, "type", "");
    ASSIGN_OR_RETURN(std::optional<Json> chat_part, ContentPart(part, type, part_at));
    if (!chat_part) {
      return InvalidField(part_at + ".type",
                          absl::StrCat("unsupported tool_result content block type '", type,
                                       "' (expected text or image)"));
    }
    parts.push_back(*std::move(chat_part));
  }
  return parts;
}

// One Anthropic message → chat messages appended to `out` (a user turn may become tool messages
// and a user message; an assistant turn one message with its tool calls).
absl::Status AppendMessage(const Json& message, const std::string& at, Json* out) {
  if (!message.is_object()) return InvalidType(at, "a message object");
  ASSIGN_OR_RETURN(std::optional<std::string> given_role,
                   FieldReader(message, at + ".").String("role"));
  const std::string role = given_role.value_or("");
  if (role != "user" && role != "assistant") {
    return InvalidField(at + ".role", absl::StrCat("unknown role '", role,
                                                   "' (expected user or assistant; "
                                                   "the system prompt goes in 'system')"));
  }
  auto content = message.find("content");
  if (content == message.end()) return MissingField(at + ".content");
  if (content->is_string()) {
    out->push_back({{"role", role}, {"content", *content}});
    return absl::OkStatus();
  }
  if (!content->is_array()) return InvalidType(at + ".content", "a string or an array of blocks");
  Json parts = Json::array();
  Json tool_calls = Json::array();
  for (size_t j = 0; j < content->size(); ++j) {
    const Json& block = (*content)[j];
    const std::string block_at = absl::StrCat(at, ".content[", j, "]");
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) {
      return InvalidType(block_at, "a content block with a string 'type'");
    }
    const std::string& type = block["type"].get_ref<const std::string&>();
    ASSIGN_OR_RETURN(std::optional<Json> chat_part, ContentPart(block, type, block_at));
    if (chat_part) {
      parts.push_back(*std::move(chat_part));
    } else if (type == "tool_use" && role == "assistant") {
      ASSIGN_OR_RETURN(Json id, StringAt(block, "id", block_at));
      ASSIGN_OR_RETURN(Json name, StringAt(block, "name", block_at));
      const Json input = block.value("input", Json::object());
      if (!input.is_object()) return InvalidType(block_at + ".input", "an object");
      tool_calls.push_back({{"id", id},
                            {"type", "function"},
                            {"function", {{"name", name}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      ASSIGN_OR_RETURN(Json id, StringAt(block, "tool_use_id", block_at));
      ASSIGN_OR_RETURN(Json result, ToolResultContent(block, block_at));
      out->push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", std::move(result)}});
    } else if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") {
      continue;  // earlier reasoning is not shown to the model again
    } else {
      return InvalidField(
          block_at + ".type",
          absl::StrCat("unsupported content block type '", type, "' in a ", role,
                       " message (user: text, image, tool_result; assistant: text, tool_use, "
                       "thinking)"));
    }
  }
  if (role == "assistant") {
    Json m = {{"role", "assistant"}, {"content", std::move(parts)}};
    if (!tool_calls.empty()) m["tool_calls"] = std::move(tool_calls);
    out->push_back(std::move(m));
  } else if (!parts.empty()) {
    out->push_back({{"role", "user"}, {"content", std::move(parts)}});
  }
  return absl::OkStatus();
}

// system: a string or an array of text blocks.
absl::StatusOr<Json> SystemText(const Json& system) {
  if (system.is_string()) return system;
  if (!system.is_array()) return InvalidType("system", "a string or an array of text blocks");
  std::string text;
  for (size_t i = 0; i < system.size(); ++i) {
    const std::string at = absl::StrCat("system[", i, "]");
    if (StringOr(system[i], "type", "") != "text") {
      return InvalidType(at, "a text block");
    }
    ASSIGN_OR_RETURN(Json part, StringAt(system[i], "text", at));
    if (!text.empty()) text += "\n\n";
    text += part.get<std::string>();
  }
  return Json(text);
}

// tools: client tools {name, description, input_schema} → chat function tools.
absl::StatusOr<Json> MessagesChatTools(const Json& tools) {
  if (!tools.is_array()) return InvalidType("tools", "an array of tools");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string at = absl::StrCat("tools[", i, "]");
    if (!tool.is_object()) return InvalidType(at, "a tool object");
    ASSIGN_OR_RETURN(std::optional<std::string> given_type,
                     FieldReader(tool, at + ".").String("type"));
    const std::string type = given_type.value_or("custom");
    if (type != "custom") {
      return UnsupportedField(at + ".type", absl::StrCat("'", type,
                                                         "' is a server tool; only client "
                                                         "tools (name, input_schema) are served"));
    }
    Json function = {{"name", tool.contains("name") ? tool["name"] : Json()}};
    if (tool.contains("description")) function["description"] = tool["description"];
    if (tool.contains("input_schema")) function["parameters"] = tool["input_schema"];
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

// The Messages param for a chat param an error names.
std::string MessagesParam(const std::string& chat_param) {
  if (absl::StartsWith(chat_param, "stop")) return "stop_sequences";
  if (absl::StartsWith(chat_param, "messages")) return "messages";  // indices differ
  if (absl::StartsWith(chat_param, "tool_choice")) return "tool_choice";
  if (absl::StartsWith(chat_param, "tools[")) {
    // tools[i].function.parameters... → tools[i].input_schema...
    std::string out = chat_param;
    for (const auto& [from, to] :
         {std::pair<std::string_view, std::string_view>{".function.parameters", ".input_schema"},
          {".function", ""}}) {
      const size_t at = out.find(from);
      if (at != std::string::npos) out.replace(at, from.size(), to);
    }
    return out;
  }
  return chat_param;
}

}  // namespace

absl::StatusOr<ChatCompletionRequest> ParseMessagesRequest(const Json& body,
                                                           const RequestLimits& limits,
                                                           bool count_tokens) {
  Json chat = Json::object();
  for (std::string_view key : kMessagesSameAsChat) {
    if (auto it = body.find(key); it != body.end()) chat[std::string(key)] = *it;
  }
  if (count_tokens) chat.erase("stream");
  auto max_tokens = body.find("max_tokens");
  if (max_tokens != body.end() && !max_tokens->is_null()) {
    if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1) {
      return InvalidField("max_tokens", "'max_tokens' must be an integer >= 1");
    }
    chat["max_tokens"] = *max_tokens;
  } else if (!count_tokens) {
    return MissingField("max_tokens");
  }
  Json messages = Json::array();
  if (auto system = body.find("system"); system != body.end() && !system->is_null()) {
    ASSIGN_OR_RETURN(Json text, SystemText(*system));
    messages.push_back({{"role", "system"}, {"content", std::move(text)}});
  }
  auto input = body.find("messages");
  if (input == body.end() || input->is_null()) return MissingField("messages");
  if (!input->is_array() || input->empty()) {
    return InvalidType("messages", "a non-empty array of messages");
  }
  for (size_t i = 0; i < input->size(); ++i) {
    RETURN_IF_ERROR(AppendMessage((*input)[i], absl::StrCat("messages[", i, "]"), &messages));
  }
  chat["messages"] = std::move(messages);
  if (auto stop = body.find("stop_sequences"); stop != body.end() && !stop->is_null()) {
    if (!stop->is_array()) return InvalidType("stop_sequences", "an array of strings");
    chat["stop"] = *stop;
  }
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    ASSIGN_OR_RETURN(chat["tools"], MessagesChatTools(*tools));
  }
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
    if (!choice->is_object()) return InvalidType("tool_choice", "an object with a 'type'");
    const std::string type = choice->value("type", "");
    if (type == "auto") {
      chat["tool_choice"] = "auto";
    } else if (type == "any") {
      chat["tool_choice"] = "required";
    } else if (type == "none") {
      chat["tool_choice"] = "none";
    } else if (type == "tool") {
      ASSIGN_OR_RETURN(Json name, StringAt(*choice, "name", "tool_choice"));
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
    } else {
      return InvalidField("tool_choice.type", absl::StrCat("unknown tool_choice type '", type,
                                                           "' (expected auto, any, tool or none)"));
    }
    if (choice->value("disable_parallel_tool_use", false) == true) {
      chat["parallel_tool_calls"] = false;
    }
  }
  if (auto thinking = body.find("thinking"); thinking != body.end() && !thinking->is_null()) {
    if (!thinking->is_object()) return InvalidType("thinking", "an object");
    const std::string type = thinking->value("type", "");
    if (type != "enabled" && type != "disabled") {
      return InvalidField("thinking.type", absl::StrCat("unknown thinking type '", type,
                                                        "' (expected enabled or disabled)"));
    }
    chat["chat_template_kwargs"] = {{"thinking", type == "enabled"}};
    // budget_tokens caps the reasoning, as vLLM's thinking_token_budget does.
    if (auto budget = thinking->find("budget_tokens");
        type == "enabled" && budget != thinking->end() && !budget->is_null()) {
      if (!budget->is_number_integer() || budget->get<int64_t>() < 1) {
        return InvalidField("thinking.budget_tokens",
                            "'thinking.budget_tokens' must be a positive integer");
      }
      chat["thinking_token_budget"] = *budget;
    }
  }
  absl::StatusOr<ChatCompletionRequest> parsed = ParseChatCompletionRequest(chat, limits);
  if (!parsed.ok()) return WithParamRenamed(parsed.status(), MessagesParam);
  NoteUnknownFields(body, MessagesFields());
  return parsed;
}

}  // namespace strata::frontend
