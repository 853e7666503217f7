#include "engine/tokenizer/chat_template.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/json_limits.h"
#include "core/status.h"
#include "engine/tokenizer/internal/absl_view.h"
#include "engine/tokenizer/jinja/interpreter.h"
#include "engine/tokenizer/python_json.h"
#include "engine/tokenizer/xtml_renderer.h"

namespace strata::engine {
namespace {

using Json = nlohmann::ordered_json;
using internal::Av;

// Locates errors as the chat template's, except raise_exception() messages, which are the
// template's own words for the client.
absl::Status Prefixed(const absl::Status& s) {
  if (jinja::IsRaisedError(s)) return s;
  return absl::Status(s.code(),
                      absl::StrCat("chat template: ",
                                   Av(std::string_view(s.message().data(), s.message().size()))));
}

// vLLM's _postprocess_messages: tool-call arguments become objects for the template.
absl::StatusOr<Json> NormaliseMessages(const Json& messages, const ChatTemplateOptions& options) {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be an array");
  Json out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    Json& m = out[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "] must be an object with a string 'role'"));
    }
    if (!options.parse_tool_arguments || !m.contains("tool_calls") || !m["tool_calls"].is_array()) {
      continue;
    }
    for (size_t c = 0; c < m["tool_calls"].size(); ++c) {
      Json& call = m["tool_calls"][c];
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      Json& fn = call["function"];
      if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
      // Text that is not JSON stays text; JSON past core/json_limits.h's limits is refused
      // (the template's values and filters walk it recursively).
      absl::StatusOr<Json> parsed = ParseBoundedJson(fn["arguments"].get_ref<const std::string&>());
      if (parsed.ok()) {
        fn["arguments"] = *std::move(parsed);
      } else if (IsJsonLimitError(parsed.status())) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", i, "].tool_calls[", c,
                         "].function.arguments: ", parsed.status().message()));
      }
    }
  }
  return out;
}

}  // namespace

std::vector<int32_t> EncodePrompt(const Tokenizer& tokenizer, const RenderedPrompt& prompt) {
  std::vector<int32_t> ids;
  for (const PromptSegment& segment : prompt.segments) {
    EncodeOptions options;
    options.parse_special = segment.control;
    std::vector<int32_t> piece = tokenizer.Encode(segment.text, options);
    ids.insert(ids.end(), piece.begin(), piece.end());
  }
  return ids;
}

void TruncatePrompt(RenderedPrompt* prompt, size_t num_bytes) {
  CHECK_LE(num_bytes, prompt->text.size());
  prompt->text.resize(num_bytes);
  size_t at = 0;
  size_t kept = 0;
  for (; kept < prompt->segments.size() && at < num_bytes; ++kept) {
    std::string& text = prompt->segments[kept].text;
    if (at + text.size() > num_bytes) text.resize(num_bytes - at);
    at += text.size();
  }
  prompt->segments.resize(kept);
}

ChatTemplate ChatTemplate::Xtml() {
  ChatTemplate ct;
  ct.xtml_ = true;
  return ct;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Create(std::string_view source,
                                                  ChatTemplateTokens tokens,
                                                  ChatTemplateOptions options) {
  absl::StatusOr<std::shared_ptr<const jinja::Template>> t = jinja::Template::Parse(source);
  if (!t.ok()) return Prefixed(t.status());
  ChatTemplate ct;
  ct.template_ = std::move(*t);
  ct.tokens_ = std::move(tokens);
  ct.options_ = options;
  return ct;
}

absl::StatusOr<ChatTemplate> ChatTemplate::ForTokenizer(const Tokenizer& tokenizer, bool with_tools,
                                                        std::optional<std::string_view> given) {
  const TokenizerConfig& config = tokenizer.config();
  const auto& templates = config.chat_templates;
  if (!given && UsesXtml(tokenizer)) return Xtml();
  if (!given && config.model_type == "kimi_k3" && templates.empty()) {
    // A K3 checkpoint with neither the control tokens nor a template: refused by name rather
    // than prompted in K2's format.
    RETURN_IF_ERROR(CheckXtmlControlTokens(tokenizer));
  }
  std::string_view source = BuiltinKimiChatTemplate();
  if (given) {
    source = *given;
  } else if (with_tools && templates.count("tool_use")) {
    source = templates.at("tool_use");
  } else if (templates.count("default")) {
    source = templates.at("default");
  } else if (!templates.empty()) {
    source = templates.begin()->second;
  }
  ChatTemplateTokens tokens{config.bos_token, config.eos_token, config.pad_token, config.unk_token};
  ChatTemplateOptions options;
  options.sort_tool_keys = config.kimi_tokenizer;
  return Create(source, std::move(tokens), options);
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatTemplateInputs& inputs) const {
  if (!xtml_) return RenderJinja(inputs);
  ASSIGN_OR_RETURN(RenderedPrompt prompt, RenderXtml(inputs));
  return std::move(prompt.text);
}

absl::StatusOr<RenderedPrompt> ChatTemplate::RenderPrompt(const ChatTemplateInputs& inputs) const {
  if (xtml_) return RenderXtml(inputs);
  ASSIGN_OR_RETURN(std::string text, RenderJinja(inputs));
  RenderedPrompt prompt;
  prompt.segments.push_back({text, /*control=*/true});
  prompt.text = std::move(text);
  return prompt;
}

absl::StatusOr<std::string> ChatTemplate::RenderJinja(const ChatTemplateInputs& inputs) const {
  absl::StatusOr<Json> messages = NormaliseMessages(inputs.messages, options_);
  if (!messages.ok()) return Prefixed(messages.status());
  if (!inputs.tools.is_null() && !inputs.tools.is_array()) {
    return absl::InvalidArgumentError("chat template: tools must be an array");
  }
  if (!inputs.kwargs.is_null() && !inputs.kwargs.is_object()) {
    return absl::InvalidArgumentError("chat template: chat_template_kwargs must be an object");
  }
  Json context = Json::object();
  context["messages"] = std::move(*messages);
  context["tools"] = options_.sort_tool_keys ? SortKeysDeep(inputs.tools) : inputs.tools;
  context["add_generation_prompt"] = inputs.add_generation_prompt;
  for (auto [name, value] :
       {std::pair{"bos_token", &tokens_.bos_token}, std::pair{"eos_token", &tokens_.eos_token},
        std::pair{"pad_token", &tokens_.pad_token}, std::pair{"unk_token", &tokens_.unk_token}}) {
    if (value->has_value()) context[name] = **value;
  }
  if (inputs.kwargs.is_object()) {
    // A kwarg replaces a variable set above or adds one; adding appends (operator[] scans the
    // context for the key each time: 100,000 kwargs would take seconds).
    std::set<std::string, std::less<>> set_above;
    for (const auto& [k, v] : context.items()) set_above.insert(k);
    for (const auto& [k, v] : inputs.kwargs.items()) {
      if (k == "messages") continue;
      if (set_above.count(k) != 0) {
        context[k] = v;
      } else {
        AppendNewMember(&context, k, v);
      }
    }
  }
  absl::StatusOr<std::string> out = template_->Render(context);
  if (!out.ok()) return Prefixed(out.status());
  return out;
}

}  // namespace strata::engine
