#include "engine/tokenizer/xtml_renderer.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json_limits.h"
#include "core/status.h"
#include "engine/tokenizer/internal/absl_view.h"
#include "engine/tokenizer/python_json.h"
#include "engine/tokenizer/xtml_markers.h"

namespace strata::engine {
namespace {

using Json = nlohmann::ordered_json;
using internal::Cat;

// ---- fixed texts ---------------------------------------------------------------------------
// Copied byte for byte from Moonshot's encoding_k3.py (the Kimi K3 repository's renderer): the
// model was trained on these exact words, so they are data, not prose to edit.
constexpr std::string_view kToolDeclareHeading =
    "# Tools\n"
    "Here are the available tools, described in JSONSchema.\n\n";
constexpr std::string_view kDynamicToolDeclareHeading =
    "## New Tools Available\n"
    "The system dynamically extends the toolset via lazy-loading.\n"
    "You have access to all existing and extended tools.\n"
    "Here are the specs for the extended tools.\n\n";
constexpr std::string_view kThinkingEffortNote =
    "`thinking_effort` guides on how much to think in your thinking channel (not including the "
    "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
    "Now the system is invoked with `thinking_effort=";  // + EFFORT + "`."
constexpr std::string_view kToolChoiceRequiredNote =
    "The system is invoked with `tool_choice=required`.\n"
    "You MUST call tools in the next message.";
constexpr std::string_view kToolChoiceNoneNote =
    "The system is invoked with `tool_choice=none`.\n"
    "You MUST NOT call any tools in the next message.";
constexpr std::string_view kJsonObjectNote =
    "The system is invoked with `response_format=json_object`.\n"
    "Your response must be raw JSON data without markdown code blocks (```json) or any "
    "additional formatting.";
constexpr std::string_view kJsonSchemaNote =
    "The system is invoked with `response_format=json_schema`.\n"
    "Your response must be raw JSON data without markdown code blocks (```json) or any "
    "additional formatting.\n"
    "The JSON data must match the following schema:\n";  // + "```json\n" SCHEMA "\n```"

constexpr std::string_view kEfforts[] = {"low", "high", "max"};

// ---- Python's value semantics ----------------------------------------------------------------

// Python truthiness of a JSON value.
bool Truthy(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      return false;
    case Json::value_t::boolean:
      return v.get<bool>();
    case Json::value_t::number_integer:
      return v.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return v.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return v.get<double>() != 0.0;
    case Json::value_t::string:
      return !v.get_ref<const std::string&>().empty();
    default:
      return !v.empty();
  }
}

// str() of a scalar (an attribute value: a name, a tool name). Containers are refused: no
// renderer input puts one there.
absl::StatusOr<std::string> PyStr(const Json& v, std::string_view what) {
  switch (v.type()) {
    case Json::value_t::string:
      return v.get<std::string>();
    case Json::value_t::boolean:
      return std::string(v.get<bool>() ? "True" : "False");
    case Json::value_t::null:
      return std::string("None");
    case Json::value_t::number_float:
      return PythonJsonFloat(v.get<double>());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return v.dump();
    default:
      return absl::InvalidArgumentError(Cat(what, " must be a string"));
  }
}

// A JSON string literal as json.dumps(ensure_ascii=False) writes it; non-ASCII bytes as they are.
void AppendPyJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (const char c : s) AppendJsonStringByte(c, /*ensure_ascii=*/false, out);
  out->push_back('"');
}

// Python's json.dumps(v, ensure_ascii=False) with separators (",", ":") when `compact`, else the
// default (", ", ": "). Keys in the object's order.
void AppendPyJson(const Json& v, bool compact, std::string* out) {
  switch (v.type()) {
    case Json::value_t::object: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out->append(compact ? "," : ", ");
        first = false;
        AppendPyJsonString(key, out);
        out->append(compact ? ":" : ": ");
        AppendPyJson(item, compact, out);
      }
      out->push_back('}');
      return;
    }
    case Json::value_t::array: {
      out->push_back('[');
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out->append(compact ? "," : ", ");
        AppendPyJson(v[i], compact, out);
      }
      out->push_back(']');
      return;
    }
    case Json::value_t::string:
      AppendPyJsonString(v.get_ref<const std::string&>(), out);
      return;
    case Json::value_t::number_float:
      out->append(PythonJsonFloat(v.get<double>()));
      return;
    default:
      out->append(v.dump());  // null, true, false, integers
  }
}

std::string PyJson(const Json& v, bool compact) {
  std::string out;
  AppendPyJson(v, compact, &out);
  return out;
}

// vLLM's serving layer sends `tools` as its models dump them (exclude_none): a null field of a
// tool or of its `function` is left out; nulls inside `parameters` are schema content and stay.
Json DropNullToolFields(const Json& tools) {
  if (!tools.is_array()) return tools;
  auto drop_nulls = [](const Json& object) {
    Json out = Json::object();
    for (const auto& [k, item] : object.items()) {
      if (!item.is_null()) AppendNewMember(&out, k, item);
    }
    return out;
  };
  Json out = Json::array();
  for (const Json& tool : tools) {
    if (!tool.is_object()) {
      out.push_back(tool);
      continue;
    }
    Json kept = drop_nulls(tool);
    if (kept.contains("function") && kept["function"].is_object()) {
      kept["function"] = drop_nulls(kept["function"]);
    }
    out.push_back(std::move(kept));
  }
  return out;
}

// Python's str.strip() for the ASCII whitespace our fixed bodies could carry.
std::string_view Strip(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) + 1 - begin);
}

const Json* Find(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// dict.get(key) with None for absent.
const Json& Get(const Json& object, std::string_view key) {
  static const Json kNull;
  const Json* found = Find(object, key);
  return found == nullptr ? kNull : *found;
}

// ---- segments ------------------------------------------------------------------------------

class SegmentWriter {
 public:
  explicit SegmentWriter(const ChatTemplateInputs& inputs) : inputs_(inputs) {}

  void Control(std::string_view marker) { Add(marker, true); }
  void Text(std::string_view text) { Add(text, false); }

  // `<|open|>tag key="value"...<|sep|>`; values already str()'d, escaped here.
  void Open(std::string_view tag, const std::vector<std::pair<std::string, std::string>>& attrs) {
    Control(xtml::kOpen);
    Text(tag);
    for (const auto& [key, value] : attrs) {
      Text(Cat(" ", key));
      Text("=\"");
      Text(EscapeAttr(value));
      Text("\"");
    }
    Control(xtml::kSep);
  }
  void Open(std::string_view tag) { Open(tag, {}); }
  void Close(std::string_view tag) {
    Control(xtml::kClose);
    Text(tag);
    Control(xtml::kSep);
  }
  void EndOfMessage() { Control(xtml::kEndOfMessage); }
  // K3's media block of an image part (its size as given by ChatTemplateInputs::image_size):
  // `<|media_begin|>image WxH<|media_content|><|media_pad|><|media_end|>`.
  absl::Status Image(const std::string& url, std::string_view where) {
    if (!inputs_.image_size) {
      return absl::InvalidArgumentError(
          Cat(where, ": image input needs a model with a vision tower (this one has none)"));
    }
    ASSIGN_OR_RETURN(const ImageSize size, inputs_.image_size(url));
    Control(xtml::kMediaBegin);
    Text(Cat("image ", size.width, "x", size.height));
    Control(xtml::kMediaContent);
    Control(xtml::kMediaPad);
    Control(xtml::kMediaEnd);
    prompt_.image_urls.push_back(url);
    return absl::OkStatus();
  }

  RenderedPrompt Take() { return std::move(prompt_); }

 private:
  // `&` first, then `"`; nothing else is escaped.
  static std::string EscapeAttr(std::string_view value) {
    std::string out;
    for (const char c : value) {
      if (c == '&') {
        out.append("&amp;");
      } else if (c == '"') {
        out.append("&quot;");
      } else {
        out.push_back(c);
      }
    }
    return out;
  }
  // Empty pieces are no segment (encoding_k3's _segment).
  void Add(std::string_view text, bool control) {
    if (text.empty()) return;
    prompt_.segments.push_back({std::string(text), control});
    prompt_.text.append(text);
  }

  const ChatTemplateInputs& inputs_;
  RenderedPrompt prompt_;
};

using Attrs = std::vector<std::pair<std::string, std::string>>;

// A system message Strata writes itself (`type` = message_type).
void InternalSystemMessage(std::string_view message_type, std::string_view body, SegmentWriter* w) {
  w->Open("message", {{"role", "system"}, {"type", std::string(message_type)}});
  w->Text(Strip(body));
  w->Close("message");
  w->EndOfMessage();
}

void ToolDeclaration(const Json& tools, bool dynamic, SegmentWriter* w) {
  const std::string body = Cat(dynamic ? kDynamicToolDeclareHeading : kToolDeclareHeading,
                               "```json\n", PyJson(tools, /*compact=*/true), "\n```");
  w->Open("message", {{"role", "system"}, {"type", "tool-declare"}});
  w->Text(body);
  w->Close("message");
  w->EndOfMessage();
}

// String content as is; content parts: each text part's text, in order (no separator).
absl::Status Content(const Json& content, std::string_view where, SegmentWriter* w) {
  if (content.is_null()) return absl::OkStatus();
  if (content.is_string()) {
    w->Text(content.get_ref<const std::string&>());
    return absl::OkStatus();
  }
  if (!content.is_array()) {
    return absl::InvalidArgumentError(
        Cat(where, ".content must be a string or an array of content parts"));
  }
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string at = Cat(where, ".content[", i, "]");
    if (!part.is_object()) {
      return absl::InvalidArgumentError(Cat(at, " must be an object"));
    }
    const Json& type = Get(part, "type");
    if (type == "image_url") {
      const Json& image = Get(part, "image_url");
      const Json& url = image.is_object() ? Get(image, "url") : image;
      if (!url.is_string()) return absl::InvalidArgumentError(Cat(at, ".image_url has no url"));
      RETURN_IF_ERROR(w->Image(url.get<std::string>(), at));
      continue;
    }
    const Json* text = Find(part, "text");
    if (text == nullptr) return absl::InvalidArgumentError(Cat(at, " has no 'text'"));
    ASSIGN_OR_RETURN(std::string piece, PyStr(*text, Cat(at, ".text")));
    w->Text(piece);
  }
  return absl::OkStatus();
}

// A call's arguments: an object (from an object, or a JSON object string; null or blank: {}),
// or, for a string that is not JSON, that raw text (rendered as a `json` block).
struct CallArguments {
  Json object = Json::object();
  std::optional<std::string> raw;
};

absl::StatusOr<CallArguments> NormaliseArguments(const Json& arguments, std::string_view where) {
  CallArguments out;
  if (arguments.is_null()) return out;
  if (arguments.is_object()) {
    out.object = arguments;
    return out;
  }
  if (!arguments.is_string()) {
    return absl::InvalidArgumentError(Cat(where, " must be an object or a JSON object string"));
  }
  const std::string& text = arguments.get_ref<const std::string&>();
  if (Strip(text).empty()) return out;
  absl::StatusOr<Json> parsed = ParseBoundedJson(text);
  if (!parsed.ok()) {
    if (IsJsonLimitError(parsed.status())) {
      return absl::InvalidArgumentError(Cat(where, ": ", parsed.status().message()));
    }
    out.raw = text;
    return out;
  }
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError(
        Cat(where, " must be a JSON object (Kimi K3 tool call arguments)"));
  }
  out.object = *std::move(parsed);
  return out;
}

std::string_view ArgumentType(const Json& v) {
  if (v.is_boolean()) return "boolean";  // before number: JSON true is no number here
  if (v.is_null()) return "null";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_object()) return "object";
  return "array";
}

// The function of a tool call: its `function` object, else the call itself (a flat call).
const Json& CallFunction(const Json& call) {
  const Json* fn = Find(call, "function");
  return fn == nullptr ? call : *fn;
}

absl::Status AssistantMessage(const Json& m, std::string_view where, bool thinking,
                              SegmentWriter* w) {
  if (thinking) {
    // Every assistant turn carries the think channel, empty without reasoning.
    const Json& reasoning =
        Truthy(Get(m, "reasoning_content")) ? Get(m, "reasoning_content") : Get(m, "reasoning");
    w->Open("think");
    if (!reasoning.is_null()) {
      ASSIGN_OR_RETURN(std::string text, PyStr(reasoning, Cat(where, ".reasoning")));
      if (!Strip(text).empty()) w->Text(text);
    }
    w->Close("think");
  }
  w->Open("response");
  RETURN_IF_ERROR(Content(Get(m, "content"), where, w));
  w->Close("response");

  const Json& calls = Get(m, "tool_calls");
  if (!Truthy(calls)) return absl::OkStatus();
  if (!calls.is_array()) {
    return absl::InvalidArgumentError(Cat(where, ".tool_calls must be an array"));
  }
  w->Open("tools");
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = Cat(where, ".tool_calls[", i, "]");
    if (!calls[i].is_object()) return absl::InvalidArgumentError(at + " must be an object");
    const Json& fn = CallFunction(calls[i]);
    const Json* name = Find(fn, "name");
    if (name == nullptr) return absl::InvalidArgumentError(at + " has no function name");
    ASSIGN_OR_RETURN(std::string name_text, PyStr(*name, at + ".function.name"));
    ASSIGN_OR_RETURN(CallArguments args,
                     NormaliseArguments(Get(fn, "arguments"), at + ".function.arguments"));
    w->Open("call", {{"tool", name_text}, {"index", Cat(i + 1)}});
    if (args.raw) {
      w->Open("json", {{"type", "object"}});
      w->Text(*args.raw);
      w->Close("json");
    } else {
      for (const auto& [key, value] : args.object.items()) {
        w->Open("argument", {{"key", key}, {"type", std::string(ArgumentType(value))}});
        w->Text(value.is_string() ? value.get<std::string>() : PyJson(value, /*compact=*/false));
        w->Close("argument");
      }
    }
    w->Close("call");
  }
  w->Close("tools");
  return absl::OkStatus();
}

// OpenAI's `developer` role is K3's `system` (its `tools`, if any, kept).
Json DeveloperAsSystem(const Json& messages) {
  Json out = messages;
  for (Json& m : out) {
    if (m.is_object() && Get(m, "role") == "developer") m["role"] = "system";
  }
  return out;
}

// str() of a tool_call_id / call id, for matching.
std::optional<std::string> IdKey(const Json& id) {
  if (id.is_null()) return std::nullopt;
  absl::StatusOr<std::string> s = PyStr(id, "id");
  if (!s.ok()) return id.dump();
  return *s;
}

// encoding_k3's normalize_xtml_tool_result_messages: each run of consecutive tool messages is
// matched by tool_call_id (else `id`) against the latest assistant's tool_calls[].id (first
// occurrence of an id wins) and stably sorted into call order; a matched message's `tool` (and
// `name`, when present) becomes the call's function name. A run with any unmatched message is
// left as it is.
Json ReorderToolResults(const Json& messages) {
  Json out = Json::array();
  std::map<std::string, std::pair<size_t, Json>> index;  // call id -> (1-based position, name)
  auto lookup = [&index](const std::string& id) -> const std::pair<size_t, Json>* {
    auto it = index.find(id);
    return it == index.end() ? nullptr : &it->second;
  };
  size_t i = 0;
  while (i < messages.size()) {
    const Json& m = messages[i];
    const Json& role = Get(m, "role");
    if (role == "assistant") {
      index.clear();
      const Json& calls = Get(m, "tool_calls");
      if (calls.is_array()) {
        for (size_t p = 0; p < calls.size(); ++p) {
          const Json& call = calls[p];
          if (!call.is_object()) continue;
          std::optional<std::string> id = IdKey(Get(call, "id"));
          if (!id || lookup(*id) != nullptr) continue;
          const Json* fn = Find(call, "function");
          const Json& name =
              fn != nullptr && fn->is_object() ? Get(*fn, "name") : Get(call, "name");
          index.emplace(*id, std::pair<size_t, Json>(p + 1, name));
        }
      }
    }
    if (role != "tool") {
      out.push_back(m);
      ++i;
      continue;
    }
    struct Item {
      size_t position;
      size_t offset;
      const Json* message;
      const Json* name;
    };
    std::vector<Item> run;
    bool unresolved = false;
    for (size_t offset = 0; i < messages.size() && Get(messages[i], "role") == "tool";
         ++i, ++offset) {
      const Json& t = messages[i];
      const Json* id = Find(t, "tool_call_id");
      if (id == nullptr) id = &Get(t, "id");
      std::optional<std::string> key = IdKey(*id);
      const std::pair<size_t, Json>* match = key ? lookup(*key) : nullptr;
      if (match == nullptr) {
        unresolved = true;
        run.push_back({0, offset, &t, nullptr});
      } else {
        run.push_back({match->first, offset, &t, &match->second});
      }
    }
    if (unresolved) {
      for (const Item& item : run) out.push_back(*item.message);
      continue;
    }
    std::stable_sort(run.begin(), run.end(),
                     [](const Item& a, const Item& b) { return a.position < b.position; });
    for (const Item& item : run) {
      if (item.name == nullptr || item.name->is_null()) {
        out.push_back(*item.message);
        continue;
      }
      Json resolved = *item.message;
      resolved["tool"] = *item.name;
      if (resolved.contains("name")) resolved["name"] = *item.name;
      out.push_back(std::move(resolved));
    }
  }
  return out;
}

// encoding_k3's extract_response_schema, then deep-sorted: kwargs response_schema when given,
// else response_format.json_schema's `schema` (else its `json_schema`, else itself).
Json ResponseSchema(const Json& kwargs) {
  Json schema;
  if (const Json* given = Find(kwargs, "response_schema")) {
    schema = *given;
  } else {
    const Json& spec = Get(Get(kwargs, "response_format"), "json_schema");
    if (const Json* s = Find(spec, "schema")) {
      schema = *s;
    } else if (const Json* s2 = Find(spec, "json_schema")) {
      schema = *s2;
    } else {
      schema = spec;
    }
  }
  return SortKeysDeep(schema);
}

absl::StatusOr<std::optional<bool>> BoolKwarg(const Json& kwargs, std::string_view key) {
  const Json& v = Get(kwargs, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_boolean()) {
    return absl::InvalidArgumentError(
        Cat("chat_template_kwargs '", key, "' must be true or false, not ", v.dump()));
  }
  return v.get<bool>();
}

absl::StatusOr<std::optional<std::string>> StringKwarg(const Json& kwargs, std::string_view key,
                                                       std::string_view accepted) {
  const Json& v = Get(kwargs, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_string()) {
    return absl::InvalidArgumentError(
        Cat("'", key, "' must be one of ", accepted, " (Kimi K3), not ", v.dump()));
  }
  return v.get<std::string>();
}

}  // namespace

absl::StatusOr<XtmlSwitches> ResolveXtmlSwitches(const Json& kwargs) {
  if (!kwargs.is_null() && !kwargs.is_object()) {
    return absl::InvalidArgumentError("chat_template_kwargs must be an object");
  }
  constexpr std::string_view kThinkingEfforts = "low, high, max";
  constexpr std::string_view kReasoningEfforts = "none, low, high, max";
  ASSIGN_OR_RETURN(std::optional<bool> thinking, BoolKwarg(kwargs, "thinking"));
  ASSIGN_OR_RETURN(std::optional<bool> enable_thinking, BoolKwarg(kwargs, "enable_thinking"));
  ASSIGN_OR_RETURN(std::optional<std::string> thinking_effort,
                   StringKwarg(kwargs, "thinking_effort", kThinkingEfforts));
  ASSIGN_OR_RETURN(std::optional<std::string> reasoning_effort,
                   StringKwarg(kwargs, "reasoning_effort", kReasoningEfforts));
  XtmlSwitches out;
  out.thinking = thinking.value_or(enable_thinking.value_or(true));
  std::string_view effort_key = "thinking_effort";
  std::string_view accepted = kThinkingEfforts;
  if (reasoning_effort == "none") {
    out.thinking = false;
  } else if (!thinking_effort && reasoning_effort) {
    thinking_effort = reasoning_effort;
    effort_key = "reasoning_effort";
    accepted = kReasoningEfforts;
  }
  if (thinking_effort) {
    if (std::find(std::begin(kEfforts), std::end(kEfforts), *thinking_effort) ==
        std::end(kEfforts)) {
      return absl::InvalidArgumentError(Cat("'", effort_key, "' must be one of ", accepted,
                                            " (Kimi K3), not '", *thinking_effort, "'"));
    }
    out.thinking_effort = *thinking_effort;
  }
  return out;
}

absl::StatusOr<RenderedPrompt> RenderXtml(const ChatTemplateInputs& inputs) {
  ASSIGN_OR_RETURN(XtmlSwitches switches, ResolveXtmlSwitches(inputs.kwargs));
  if (!inputs.messages.is_array()) return absl::InvalidArgumentError("messages must be an array");
  if (!inputs.tools.is_null() && !inputs.tools.is_array()) {
    return absl::InvalidArgumentError("tools must be an array");
  }
  for (size_t i = 0; i < inputs.messages.size(); ++i) {
    const Json& m = inputs.messages[i];
    if (!m.is_object() || !Get(m, "role").is_string()) {
      return absl::InvalidArgumentError(
          Cat("messages[", i, "] must be an object with a string 'role'"));
    }
  }
  // Re-sorting keeps messages one for one, so messages[i] names the caller's message too.
  const Json messages = ReorderToolResults(DeveloperAsSystem(inputs.messages));
  SegmentWriter w(inputs);

  // `tools` from chat_template_kwargs when the request has none (as a Jinja kwarg would be).
  const Json& given_tools = inputs.tools.is_null() ? Get(inputs.kwargs, "tools") : inputs.tools;
  if (!given_tools.is_null() && !given_tools.is_array()) {
    return absl::InvalidArgumentError("chat_template_kwargs 'tools' must be an array");
  }
  const Json tools = SortKeysDeep(DropNullToolFields(given_tools));
  if (Truthy(tools)) ToolDeclaration(tools, /*dynamic=*/false, &w);
  if (switches.thinking) {
    InternalSystemMessage("thinking-effort",
                          Cat(kThinkingEffortNote, switches.thinking_effort, "`."), &w);
  }

  const Json* last_calls = nullptr;  // the latest assistant's tool_calls
  size_t tool_index = 0;             // tool messages since that assistant
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string where = Cat("messages[", i, "]");
    const std::string& role = Get(m, "role").get_ref<const std::string&>();
    if (role == "user" || role == "system") {
      if (role == "system" && Truthy(Get(m, "tools"))) {
        ToolDeclaration(SortKeysDeep(Get(m, "tools")), /*dynamic=*/true, &w);
        continue;
      }
      Attrs attrs = {{"role", role}};
      if (Truthy(Get(m, "name"))) {
        ASSIGN_OR_RETURN(std::string name, PyStr(Get(m, "name"), where + ".name"));
        attrs.push_back({"name", name});
      }
      w.Open("message", attrs);
      RETURN_IF_ERROR(Content(Get(m, "content"), where, &w));
      w.Close("message");
      w.EndOfMessage();
    } else if (role == "tool") {
      ++tool_index;
      const Json* tool = Find(m, "tool");
      Json name = tool != nullptr ? *tool : Get(m, "name");
      if (name.is_null() && last_calls != nullptr && last_calls->is_array() &&
          tool_index <= last_calls->size()) {
        name = Get(CallFunction((*last_calls)[tool_index - 1]), "name");
      }
      if (name.is_null()) {
        return absl::InvalidArgumentError(
            Cat(where,
                ": a tool message needs its tool's name: give 'tool_call_id' of a preceding "
                "assistant tool call, or 'name'"));
      }
      ASSIGN_OR_RETURN(std::string name_text, PyStr(name, where + ".name"));
      w.Open("message", {{"role", "tool"}, {"tool", name_text}, {"index", Cat(tool_index)}});
      RETURN_IF_ERROR(Content(Get(m, "content"), where, &w));
      w.Close("message");
      w.EndOfMessage();
    } else if (role == "assistant") {
      last_calls = Find(m, "tool_calls");
      if (last_calls != nullptr && last_calls->is_null()) last_calls = nullptr;
      tool_index = 0;
      Attrs attrs = {{"role", "assistant"}};
      if (Truthy(Get(m, "name"))) {
        ASSIGN_OR_RETURN(std::string name, PyStr(Get(m, "name"), where + ".name"));
        attrs.push_back({"name", name});
      }
      w.Open("message", attrs);
      RETURN_IF_ERROR(AssistantMessage(m, where, switches.thinking, &w));
      w.Close("message");
      w.EndOfMessage();
    }
    // Other roles are not part of K3's format (encoding_k3 skips them too).
  }

  const Json& tool_choice = Get(inputs.kwargs, "tool_choice");
  if (tool_choice == "required") {
    InternalSystemMessage("tool-choice", kToolChoiceRequiredNote, &w);
  } else if (tool_choice == "none") {
    InternalSystemMessage("tool-choice", kToolChoiceNoneNote, &w);
  }

  const Json& format = Get(inputs.kwargs, "response_format");
  const Json& format_type = format.is_object() ? Get(format, "type") : format;
  if (format_type == "json_object") {
    InternalSystemMessage("response-format", kJsonObjectNote, &w);
  } else if (format_type == "json_schema") {
    InternalSystemMessage("response-format",
                          Cat(kJsonSchemaNote, "```json\n",
                              PyJson(ResponseSchema(inputs.kwargs), /*compact=*/true), "\n```"),
                          &w);
  }

  if (inputs.add_generation_prompt) {
    w.Open("message", {{"role", "assistant"}});
    w.Open(switches.thinking ? "think" : "response");
  }
  return w.Take();
}

bool UsesXtml(const Tokenizer& tokenizer) {
  const TokenizerConfig& config = tokenizer.config();
  if (config.model_type != "kimi_k3" && !config.chat_templates.empty()) return false;
  return CheckXtmlControlTokens(tokenizer).ok();
}

absl::Status CheckXtmlControlTokens(const Tokenizer& tokenizer) {
  for (std::string_view marker : {xtml::kOpen, xtml::kClose, xtml::kSep, xtml::kEndOfMessage}) {
    if (!tokenizer.SpecialTokenId(marker).has_value()) {
      return absl::FailedPreconditionError(Cat(
          "Kimi K3's prompt format needs the control token ", marker,
          ", which the tokenizer does not define (tokenizer_config.json added_tokens_decoder)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::engine
