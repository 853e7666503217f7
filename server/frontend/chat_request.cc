// ParseChatCompletionRequest (openai_request.h): messages, tools, tool_choice, chat template
// options.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/json_limits.h"
#include "core/status.h"
#include "server/frontend/api_error.h"
#include "server/frontend/json_fields.h"
#include "server/frontend/openai_request.h"

namespace strata::frontend {
namespace {

// Every field a chat request may carry: the shared ones and its own (chat_template: known, and
// refused).
const std::vector<std::string_view>& ChatFields() {
  static const std::vector<std::string_view> fields = WithGenerationFields(
      {"messages", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
       "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "echo",
       "chat_template", "reasoning_effort", "thinking_token_budget"});
  return fields;
}

// The text of the final message: a string, or its text parts joined.
std::string FinalText(const Json& messages) {
  const Json& content = messages.back().contains("content") ? messages.back()["content"] : Json();
  if (content.is_string()) return content.get<std::string>();
  std::string text;
  if (content.is_array()) {
    for (const Json& part : content) {
      if (StringOr(part, "type", "") == "text" && part.contains("text") &&
          part["text"].is_string()) {
        text += part["text"].get<std::string>();
      }
    }
  }
  return text;
}

// FinalText, for continue_final_message (which needs some).
absl::StatusOr<std::string> FinalMessageText(const Json& messages) {
  std::string text = FinalText(messages);
  if (text.empty()) {
    return InvalidField(absl::StrCat("messages[", messages.size() - 1, "].content"),
                        "continue_final_message needs a final message with text to continue");
  }
  return text;
}

absl::Status Unsupported(std::string_view param, std::string_view message) {
  return InvalidField(param, message, "unsupported_value");
}

// A chat template sent with the request (vLLM's `chat_template`, or one in chat_template_kwargs):
// refused, as vLLM refuses it unless started with --trust-request-chat-template — a template is
// code the server runs, and the model answers best in the format it was trained on.
absl::Status RefuseRequestChatTemplate(const FieldReader& r) {
  const Json* kwargs = r.Find("chat_template_kwargs");
  const bool in_kwargs = kwargs != nullptr && kwargs->is_object() &&
                         kwargs->contains("chat_template") && !(*kwargs)["chat_template"].is_null();
  if (r.Find("chat_template") == nullptr && !in_kwargs) return absl::OkStatus();
  return Unsupported(in_kwargs ? "chat_template_kwargs.chat_template" : "chat_template",
                     "a chat template in the request is not accepted: this server renders every "
                     "chat with the model's template (or the one strata serve --chat-template "
                     "gives)");
}

// vLLM's chat `echo`: the reply's content starts with the final message's text when that
// message has the reply's role (the assistant's; with add_generation_prompt false, whichever
// role it has: the reply continues it).
std::string EchoText(const Json& messages, bool add_generation_prompt) {
  if (add_generation_prompt && StringOr(messages.back(), "role", "") != "assistant") return "";
  return FinalText(messages);
}

absl::Status ValidateImagePart(const Json& part, const std::string& path) {
  const Json* image = part.contains("image_url") ? &part["image_url"] : nullptr;
  const Json* url =
      image && image->is_object() && image->contains("url") ? &(*image)["url"] : nullptr;
  if (!url || !url->is_string()) {
    return InvalidField(path + ".image_url.url",
                        absl::StrCat("'", path, ".image_url.url' must be a string"),
                        "invalid_type");
  }
  // The image itself is decoded when the prompt is built (prompt_builder.h BuildChatPrompt),
  // where the served model's vision tower and limits are known.
  return absl::OkStatus();
}

absl::Status ValidateContent(const Json& message, const std::string& path, bool optional) {
  const Json* content = message.contains("content") ? &message["content"] : nullptr;
  const std::string param = path + ".content";
  if (!content || content->is_null()) {
    if (optional) return absl::OkStatus();
    return MissingField(param);
  }
  if (content->is_string()) return absl::OkStatus();
  if (!content->is_array()) return InvalidType(param, "a string or an array of content parts");
  for (size_t j = 0; j < content->size(); ++j) {
    const Json& part = (*content)[j];
    const std::string part_path = absl::StrCat(param, "[", j, "]");
    if (!part.is_object()) return InvalidType(part_path, "an object");
    const Json* type = part.contains("type") ? &part["type"] : nullptr;
    if (!type || !type->is_string()) return InvalidType(part_path + ".type", "a string");
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "text") {
      if (!part.contains("text") || !part["text"].is_string()) {
        return InvalidType(part_path + ".text", "a string");
      }
    } else if (t == "image_url") {
      RETURN_IF_ERROR(ValidateImagePart(part, part_path));
    } else {
      return InvalidField(part_path + ".type", absl::StrCat("unknown content part type '", t,
                                                            "' (supported: 'text', 'image_url')"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateToolCalls(const Json& message, const std::string& path) {
  const Json* calls = message.contains("tool_calls") ? &message["tool_calls"] : nullptr;
  if (!calls || calls->is_null()) return absl::OkStatus();
  const std::string param = path + ".tool_calls";
  if (!calls->is_array()) return InvalidType(param, "an array");
  for (size_t k = 0; k < calls->size(); ++k) {
    const Json& call = (*calls)[k];
    const std::string call_path = absl::StrCat(param, "[", k, "]");
    if (!call.is_object()) return InvalidType(call_path, "an object");
    FieldReader r(call, call_path + ".");
    ASSIGN_OR_RETURN(auto id, r.String("id"));
    if (!id) return MissingField(call_path + ".id");
    const Json* fn = r.Find("function");
    if (!fn || !fn->is_object()) return InvalidType(call_path + ".function", "an object");
    FieldReader f(*fn, call_path + ".function.");
    ASSIGN_OR_RETURN(auto name, f.String("name"));
    if (!name) return MissingField(call_path + ".function.name");
    ASSIGN_OR_RETURN(auto arguments, f.String("arguments"));
    if (!arguments) return MissingField(call_path + ".function.arguments");
    // The chat template gets the arguments parsed (text that is not JSON stays text); JSON past
    // the limits of core/json_limits.h is refused here, naming the field.
    if (absl::Status parsed = ParseBoundedJson(*arguments).status(); IsJsonLimitError(parsed)) {
      const std::string param = call_path + ".function.arguments";
      return InvalidField(param, absl::StrCat("'", param, "': ", parsed.message()),
                          "json_limit_exceeded");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateMessage(const Json& message, size_t i) {
  const std::string path = absl::StrCat("messages[", i, "]");
  if (!message.is_object()) return InvalidType(path, "an object");
  FieldReader r(message, path + ".");
  ASSIGN_OR_RETURN(auto role, r.String("role"));
  if (!role) return MissingField(path + ".role");
  RETURN_IF_ERROR(r.String("name").status());
  if (*role == "system" || *role == "developer" || *role == "user") {
    return ValidateContent(message, path, /*optional=*/false);
  }
  if (*role == "assistant") {
    RETURN_IF_ERROR(r.String("reasoning_content").status());
    RETURN_IF_ERROR(ValidateToolCalls(message, path));
    return ValidateContent(message, path, /*optional=*/true);
  }
  if (*role == "tool") {
    ASSIGN_OR_RETURN(auto call_id, r.String("tool_call_id"));
    if (!call_id) return MissingField(path + ".tool_call_id");
    return ValidateContent(message, path, /*optional=*/false);
  }
  return InvalidField(path + ".role",
                      absl::StrCat("unknown role '", *role,
                                   "' (expected system, developer, user, assistant or tool)"));
}

bool IsValidFunctionName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status ValidateTools(const Json& tools) {
  if (!tools.is_array()) return InvalidType("tools", "an array of tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string path = absl::StrCat("tools[", i, "]");
    const Json& tool = tools[i];
    if (!tool.is_object()) return InvalidType(path, "an object");
    FieldReader r(tool, path + ".");
    ASSIGN_OR_RETURN(auto type, r.String("type"));
    if (type.value_or("function") != "function") {
      return InvalidField(path + ".type",
                          absl::StrCat("unsupported tool type '", *type, "' (only 'function')"));
    }
    const Json* fn = r.Find("function");
    if (!fn || !fn->is_object()) return InvalidType(path + ".function", "an object");
    FieldReader f(*fn, path + ".function.");
    ASSIGN_OR_RETURN(auto name, f.String("name"));
    if (!name) return MissingField(path + ".function.name");
    if (!IsValidFunctionName(*name)) {
      return InvalidField(path + ".function.name",
                          absl::StrCat("function name '", *name,
                                       "' must be 1-64 characters of a-z, A-Z, 0-9, _ and -"));
    }
    RETURN_IF_ERROR(f.String("description").status());
    const Json* params = f.Find("parameters");
    if (params && !params->is_object()) {
      return InvalidType(path + ".function.parameters", "a JSON Schema object");
    }
  }
  return absl::OkStatus();
}

// The function name a named tool_choice gives ({"type": "function", "function": {"name"}}).
absl::StatusOr<std::string> NamedToolChoice(const Json& choice) {
  FieldReader r(choice, "tool_choice.");
  ASSIGN_OR_RETURN(auto type, r.String("type"));
  if (type.value_or("function") != "function") {
    return InvalidField("tool_choice.type", absl::StrCat("unsupported tool_choice type '", *type,
                                                         "' (only 'function')"));
  }
  const Json* fn = r.Find("function");
  if (!fn || !fn->is_object()) return InvalidType("tool_choice.function", "an object");
  FieldReader f(*fn, "tool_choice.function.");
  ASSIGN_OR_RETURN(auto name, f.String("name"));
  if (!name) return MissingField("tool_choice.function.name");
  return *name;
}

// required / named: each tool a call may name, with its parameters compiled (no parameters:
// any object).
absl::Status CompileForcedTools(ChatCompletionRequest* req, const std::string& only) {
  for (size_t i = 0; i < req->tools.size(); ++i) {
    const Json& fn = req->tools[i]["function"];
    const std::string& name = fn["name"].get_ref<const std::string&>();
    if (!only.empty() && name != only) continue;
    structured::ToolSpec spec;
    spec.name = name;
    auto params = fn.find("parameters");
    if (params == fn.end() || params->is_null()) {
      spec.arguments =
          std::make_shared<structured::JsonGrammar>(structured::AnyJsonObjectGrammar());
    } else {
      ASSIGN_OR_RETURN(
          spec.arguments,
          CompileSchemaField(*params, absl::StrCat("tools[", i, "].function.parameters")));
    }
    req->forced_tools.push_back(std::move(spec));
  }
  if (req->forced_tools.empty()) {
    return InvalidField("tool_choice.function.name",
                        absl::StrCat("tool_choice names '", only, "', which is not in 'tools'"));
  }
  return absl::OkStatus();
}

absl::Status ReadToolChoice(const Json& body, ChatCompletionRequest* req) {
  const bool has_tools = req->tools.is_array() && !req->tools.empty();
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) {
    req->tool_choice = ToolChoice::kAuto;
    return absl::OkStatus();
  }
  if (it->is_string()) {
    const std::string& choice = it->get_ref<const std::string&>();
    if (choice == "none") {
      req->tool_choice = ToolChoice::kNone;
      return absl::OkStatus();
    }
    if (choice != "auto" && choice != "required") {
      return InvalidField("tool_choice", absl::StrCat("unknown tool_choice '", choice,
                                                      "' (expected none, auto or required)"));
    }
    if (!has_tools) {
      return InvalidField("tool_choice",
                          absl::StrCat("'tool_choice' '", choice, "' requires 'tools' to be set"));
    }
    if (choice == "auto") {
      req->tool_choice = ToolChoice::kAuto;
      return absl::OkStatus();
    }
    req->tool_choice = ToolChoice::kRequired;
    return CompileForcedTools(req, "");
  }
  if (it->is_object()) {
    ASSIGN_OR_RETURN(std::string name, NamedToolChoice(*it));
    if (!has_tools) {
      return InvalidField("tool_choice", "a named 'tool_choice' requires 'tools' to be set");
    }
    req->tool_choice = ToolChoice::kNamed;
    return CompileForcedTools(req, name);
  }
  return InvalidType("tool_choice", "a string or an object");
}

}  // namespace

absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(const Json& body,
                                                                 const RequestLimits& limits) {
  ChatCompletionRequest req;
  auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null()) return MissingField("messages");
  if (!messages->is_array()) return InvalidType("messages", "an array of messages");
  if (messages->empty()) {
    return InvalidField("messages", "'messages' must contain at least one message");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    RETURN_IF_ERROR(ValidateMessage((*messages)[i], i));
  }
  req.messages = *messages;
  ASSIGN_OR_RETURN(req.gen, ParseGenerationFields(body, limits, /*logprobs_style_chat=*/true));
  FieldReader r(body);
  if (const Json* tools = r.Find("tools")) {
    RETURN_IF_ERROR(ValidateTools(*tools));
    if (!tools->empty()) req.tools = *tools;
  }
  RETURN_IF_ERROR(ReadToolChoice(body, &req));
  ASSIGN_OR_RETURN(auto parallel, r.Bool("parallel_tool_calls"));
  req.parallel_tool_calls = parallel.value_or(true);
  if (req.gen.constrained() &&
      (req.tool_choice == ToolChoice::kRequired || req.tool_choice == ToolChoice::kNamed)) {
    return Unsupported("response_format",
                       "response_format together with a forced tool_choice (required or named) "
                       "is not supported: the reply is the tool call");
  }
  if (const Json* kwargs = r.Find("chat_template_kwargs")) {
    if (!kwargs->is_object()) return InvalidType("chat_template_kwargs", "an object");
    req.chat_template_kwargs = *kwargs;
  }
  // vLLM merges a top-level reasoning_effort into the template kwargs (it wins over theirs).
  ASSIGN_OR_RETURN(req.reasoning_effort, r.String("reasoning_effort"));
  if (req.reasoning_effort) {
    if (!req.chat_template_kwargs.is_object()) req.chat_template_kwargs = Json::object();
    req.chat_template_kwargs["reasoning_effort"] = *req.reasoning_effort;
  }
  ASSIGN_OR_RETURN(req.thinking_token_budget,
                   r.Integer("thinking_token_budget", 0, kMaxTokensLimit));
  if (const Json* format = r.Find("response_format")) req.response_format = *format;
  ASSIGN_OR_RETURN(auto add_generation_prompt, r.Bool("add_generation_prompt"));
  ASSIGN_OR_RETURN(auto continue_final, r.Bool("continue_final_message"));
  req.continue_final_message = continue_final.value_or(false);
  if (req.continue_final_message) {
    if (add_generation_prompt.value_or(false)) {
      return InvalidField("continue_final_message",
                          "'continue_final_message' and 'add_generation_prompt' cannot both be "
                          "true: the reply continues the final message instead of starting one");
    }
    ASSIGN_OR_RETURN(req.final_message_text, FinalMessageText(req.messages));
  }
  req.add_generation_prompt = add_generation_prompt.value_or(!req.continue_final_message);
  RETURN_IF_ERROR(RefuseRequestChatTemplate(r));
  ASSIGN_OR_RETURN(auto echo, r.Bool("echo"));
  if (echo.value_or(false)) req.echo_text = EchoText(req.messages, req.add_generation_prompt);
  NoteUnknownFields(body, ChatFields());
  return req;
}

}  // namespace strata::frontend
