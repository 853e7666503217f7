// ParseResponsesRequest (openai_request.h): OpenAI's /v1/responses body → the chat request it
// means (docs/api.md: "may translate to chat internally"). The translation is a chat body, parsed
// by ParseChatCompletionRequest, so both endpoints validate and generate alike; errors from that
// parse are renamed to the Responses fields.
#include <iterator>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "server/frontend/api_error.h"
#include "server/frontend/json_fields.h"
#include "server/frontend/openai_request.h"

namespace strata::frontend {
namespace {

// Fields that mean the same in both APIs: copied into the chat body as they are.
constexpr std::string_view kSameAsChat[] = {"model",
                                            "stream",
                                            "temperature",
                                            "top_p",
                                            "top_k",
                                            "min_p",
                                            "seed",
                                            "presence_penalty",
                                            "frequency_penalty",
                                            "repetition_penalty",
                                            "stop",
                                            "stop_token_ids",
                                            "logit_bias",
                                            "parallel_tool_calls",
                                            "user",
                                            "priority",
                                            "request_id",
                                            "cache_salt",
                                            "min_tokens",
                                            "ignore_eos"};

// Every Responses field read here or accepted and ignored (include: only
// "message.output_text.logprobs" changes anything; truncation, service_tier: no effect on what
// this server returns).
const std::vector<std::string_view>& ResponsesFields() {
  static const std::vector<std::string_view> fields = [] {
    std::vector<std::string_view> f(std::begin(kSameAsChat), std::end(kSameAsChat));
    for (std::string_view name : {"input",
                                  "instructions",
                                  "max_output_tokens",
                                  "tools",
                                  "tool_choice",
                                  "text",
                                  "reasoning",
                                  "metadata",
                                  "store",
                                  "truncation",
                                  "include",
                                  "previous_response_id",
                                  "conversation",
                                  "prompt",
                                  "background",
                                  "top_logprobs",
                                  "service_tier",
                                  "safety_identifier",
                                  "prompt_cache_key",
                                  "max_tool_calls"}) {
      f.push_back(name);
    }
    return f;
  }();
  return fields;
}

// Request fields the server cannot honour: a 400 rather than silently different behaviour.
absl::Status UnsupportedResponsesField(absl::string_view param, absl::string_view why) {
  return InvalidField(std::string_view(param.data(), param.size()),
                      absl::StrCat("'", param, "' is not supported: ", why), "unsupported_value");
}

// Content parts of an input message → chat content parts (or a plain string).
absl::StatusOr<Json> ChatContent(const Json& content, const std::string& path) {
  if (content.is_string()) return content;
  if (!content.is_array()) return InvalidType(path, "a string or an array of content parts");
  Json parts = Json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string at = absl::StrCat(path, "[", j, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return InvalidType(at, "a content part with a string 'type'");
    }
    const std::string& type = part["type"].get_ref<const std::string&>();
    if (type == "input_text" || type == "output_text" || type == "text") {
      if (!part.contains("text") || !part["text"].is_string()) {
        return InvalidType(at + ".text", "a string");
      }
      parts.push_back({{"type", "text"}, {"text", part["text"]}});
    } else if (type == "input_image") {
      const Json* url = part.contains("image_url") ? &part["image_url"] : nullptr;
      if (url == nullptr || !url->is_string()) {
        return InvalidType(at + ".image_url", "a string (a data: URL)");
      }
      parts.push_back({{"type", "image_url"}, {"image_url", {{"url", *url}}}});
    } else {
      return InvalidField(at + ".type",
                          absl::StrCat("unsupported content part type '", type,
                                       "' (expected input_text, output_text or input_image)"));
    }
  }
  return parts;
}

// `input` (a string, or a list of message / function_call / function_call_output items) → chat
// messages after `history`'s.
absl::StatusOr<Json> ChatMessages(const Json& body, const Json& history) {
  Json messages = history;
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) return MissingField("input");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
    return messages;
  }
  if (!input->is_array() || input->empty()) {
    return InvalidType("input", "a string or a non-empty array of input items");
  }
  for (size_t i = 0; i < input->size(); ++i) {
    const Json& item = (*input)[i];
    const std::string at = absl::StrCat("input[", i, "]");
    if (!item.is_object()) return InvalidType(at, "an input item object");
    FieldReader r(item, at + ".");
    ASSIGN_OR_RETURN(std::optional<std::string> given_type, r.String("type"));
    const std::string type = given_type.value_or(item.contains("role") ? "message" : "");
    if (type == "message") {
      ASSIGN_OR_RETURN(std::optional<std::string> given_role, r.String("role"));
      const std::string role = given_role.value_or("");
      if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
        return InvalidField(at + ".role",
                            absl::StrCat("unknown role '", role,
                                         "' (expected user, assistant, system or developer)"));
      }
      if (!item.contains("content")) return MissingField(at + ".content");
      ASSIGN_OR_RETURN(Json content, ChatContent(item["content"], at + ".content"));
      messages.push_back(
          {{"role", role == "developer" ? "system" : role}, {"content", std::move(content)}});
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"}) {
        if (!item.contains(key) || !item[key].is_string()) {
          return InvalidType(absl::StrCat(at, ".", key), "a string");
        }
      }
      Json call = {{"id", item["call_id"]},
                   {"type", "function"},
                   {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      // Calls next to each other (or after the assistant's text) are one assistant turn.
      if (!messages.empty() && messages.back()["role"] == "assistant") {
        messages.back()["tool_calls"].push_back(std::move(call));
      } else {
        messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", {call}}});
      }
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string()) {
        return InvalidType(at + ".call_id", "a string");
      }
      if (!item.contains("output")) return MissingField(at + ".output");
      ASSIGN_OR_RETURN(Json output, ChatContent(item["output"], at + ".output"));
      messages.push_back(
          {{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", std::move(output)}});
    } else if (type == "reasoning") {
      continue;  // earlier reasoning is not shown to the model again (as the chat template does)
    } else {
      return InvalidField(at + ".type", absl::StrCat("unsupported input item type '", type,
                                                     "' (expected message, function_call, "
                                                     "function_call_output or reasoning)"));
    }
  }
  return messages;
}

// `input` (checked by ChatMessages) as the items GET /v1/responses/{id}/input_items lists.
Json InputItems(const Json& input) {
  auto text_part = [](const std::string& role, const Json& text) {
    return Json{{"type", role == "assistant" ? "output_text" : "input_text"}, {"text", text}};
  };
  if (input.is_string()) {
    return Json::array({{{"type", "message"},
                         {"role", "user"},
                         {"status", "completed"},
                         {"content", Json::array({text_part("user", input)})}}});
  }
  Json items = Json::array();
  for (const Json& given : input) {
    Json item = given;
    if (!item.contains("type")) item["type"] = "message";
    if (item["type"] == "message") {
      if (item["content"].is_string()) {
        item["content"] = Json::array({text_part(StringOr(item, "role", ""), item["content"])});
      }
      if (!item.contains("status")) item["status"] = "completed";
    }
    items.push_back(std::move(item));
  }
  return items;
}

// Function tools: {"type": "function", "name", "description", "parameters", "strict"} → chat.
absl::StatusOr<Json> ChatTools(const Json& tools) {
  if (!tools.is_array()) return InvalidType("tools", "an array of function tools");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string at = absl::StrCat("tools[", i, "]");
    if (StringOr(tool, "type", "") != "function") {
      return UnsupportedResponsesField(
          at + ".type", "only function tools are served (no built-in tools such as web search)");
    }
    Json function = {{"name", tool.contains("name") ? tool["name"] : Json()}};
    for (const char* key : {"description", "parameters", "strict"}) {
      if (tool.contains(key)) function[key] = tool[key];
    }
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

// The chat request's param for a Responses param it came from.
std::string ResponsesParam(const std::string& chat_param) {
  const std::pair<absl::string_view, absl::string_view> renames[] = {
      {"max_tokens", "max_output_tokens"},
      {"response_format.json_schema.schema", "text.format.schema"},
      {"response_format.json_schema", "text.format"},
      {"response_format", "text.format"},
      {"messages", "input"},
  };
  for (const auto& [from, to] : renames) {
    if (absl::StartsWith(chat_param, from)) {
      // messages[k] indices do not match input[k] (instructions, merged calls): name input.
      if (from == "messages") return std::string(to);
      return absl::StrCat(to, chat_param.substr(from.size()));
    }
  }
  const std::string tools = "tools[";
  if (absl::StartsWith(chat_param, tools)) {
    // tools[i].function.X → tools[i].X
    const size_t dot = chat_param.find(".function");
    if (dot != std::string::npos) {
      return absl::StrCat(chat_param.substr(0, dot), chat_param.substr(dot + 9));
    }
  }
  return chat_param;
}

}  // namespace

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(const Json& body,
                                                       const RequestLimits& limits,
                                                       const Json& history) {
  for (const char* unsupported : {"conversation", "prompt"}) {
    if (auto it = body.find(unsupported); it != body.end() && !it->is_null()) {
      return UnsupportedResponsesField(
          unsupported,
          "the server keeps no conversation objects or prompt templates; send the "
          "conversation in 'input' (or continue a stored response with "
          "'previous_response_id')");
    }
  }
  bool store = true;
  if (auto it = body.find("store"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return InvalidType("store", "a boolean");
    store = it->get<bool>();
  }
  Json previous_id = body.value("previous_response_id", Json());
  if (!previous_id.is_null() && !previous_id.is_string()) {
    return InvalidType("previous_response_id", "a string");
  }
  bool background = false;
  if (auto it = body.find("background"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return InvalidType("background", "a boolean");
    background = it->get<bool>();
  }
  if (background && !store) {
    return InvalidField("background",
                        "'background': true needs 'store': true (a background response is "
                        "retrieved by its id)");
  }
  Json chat = Json::object();
  // Log probabilities of the message's text: include "message.output_text.logprobs" (with
  // top_logprobs alternatives, 0 by default), or top_logprobs alone.
  bool logprobs = false;
  if (auto it = body.find("include"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return InvalidType("include", "an array of strings");
    for (const Json& item : *it) {
      if (item == "message.output_text.logprobs") logprobs = true;
    }
  }
  if (auto it = body.find("top_logprobs"); it != body.end() && !it->is_null()) {
    chat["top_logprobs"] = *it;
    logprobs = true;
  }
  if (logprobs) chat["logprobs"] = true;
  ASSIGN_OR_RETURN(Json conversation, ChatMessages(body, history));
  chat["messages"] = Json::array();
  if (auto it = body.find("instructions"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return InvalidType("instructions", "a string");
    chat["messages"].push_back({{"role", "system"}, {"content", *it}});
  }
  for (const Json& message : conversation) chat["messages"].push_back(message);
  for (std::string_view key : kSameAsChat) {
    if (auto it = body.find(key); it != body.end()) chat[std::string(key)] = *it;
  }
  if (auto it = body.find("max_output_tokens"); it != body.end()) chat["max_tokens"] = *it;
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    ASSIGN_OR_RETURN(chat["tools"], ChatTools(*it));
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    // {"type": "function", "name": N} → chat's {"type": "function", "function": {"name": N}}.
    if (it->is_object() && it->contains("name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*it)["name"]}}}};
    } else {
      chat["tool_choice"] = *it;
    }
  }
  if (auto text = body.find("text"); text != body.end() && !text->is_null()) {
    if (!text->is_object()) return InvalidType("text", "an object");
    if (auto format = text->find("format"); format != text->end() && !format->is_null()) {
      if (!format->is_object()) return InvalidType("text.format", "an object");
      Json rf = {{"type", format->value("type", "")}};
      if (rf["type"] == "json_schema") {
        Json spec = Json::object();
        for (const char* key : {"name", "schema", "strict", "description"}) {
          if (format->contains(key)) spec[key] = (*format)[key];
        }
        rf["json_schema"] = std::move(spec);
      }
      chat["response_format"] = std::move(rf);
    }
  }
  // Reasoning: an effort asks the model to think first (Kimi's `thinking` template switch);
  // "none" and "minimal" turn it off. Any other effort also reaches the template as
  // reasoning_effort (Kimi K3's thinking_effort: low, high or max, anything else a 400 naming
  // them).
  if (auto reasoning = body.find("reasoning"); reasoning != body.end() && !reasoning->is_null()) {
    if (!reasoning->is_object()) return InvalidType("reasoning", "an object");
    const Json effort = reasoning->value("effort", Json());
    if (!effort.is_null() && !effort.is_string()) {
      return InvalidType("reasoning.effort", "a string");
    }
    const bool thinking = !effort.is_null() && effort != "minimal" && effort != "none";
    chat["chat_template_kwargs"] = {{"thinking", thinking}};
    if (thinking) chat["reasoning_effort"] = effort;
  }
  absl::StatusOr<ChatCompletionRequest> parsed = ParseChatCompletionRequest(chat, limits);
  if (!parsed.ok()) return WithParamRenamed(parsed.status(), ResponsesParam);
  NoteUnknownFields(body, ResponsesFields());
  ResponsesRequest out;
  out.chat = *std::move(parsed);
  out.store = store;
  out.background = background;
  out.conversation = std::move(conversation);
  out.input_items = InputItems(body["input"]);
  // What the response object echoes back (OpenAI's Response fields).
  out.echo = {{"background", background},
              {"instructions", body.value("instructions", Json())},
              {"max_output_tokens", body.value("max_output_tokens", Json())},
              {"metadata", body.value("metadata", Json::object())},
              {"parallel_tool_calls", out.chat.parallel_tool_calls},
              {"previous_response_id", previous_id},
              {"reasoning", body.value("reasoning", Json{{"effort", nullptr}})},
              {"store", false},
              {"temperature", body.value("temperature", Json(1.0))},
              {"text", body.value("text", Json{{"format", {{"type", "text"}}}})},
              {"tool_choice", body.value("tool_choice", Json("auto"))},
              {"tools", body.value("tools", Json::array())},
              {"top_logprobs", body.value("top_logprobs", Json())},
              {"top_p", body.value("top_p", Json(1.0))},
              {"truncation", body.value("truncation", Json("disabled"))},
              {"user", body.value("user", Json())}};
  return out;
}

}  // namespace strata::frontend
