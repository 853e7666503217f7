// Chat templates: OpenAI-style messages -> the prompt text the model was trained on, rendered
// with the checkpoint's own Jinja `chat_template` (see jinja/ for the interpreter).
//
// Render context (as transformers' apply_chat_template builds it): `messages`, `tools` (none
// when absent), `add_generation_prompt`, `bos_token` / `eos_token` / `pad_token` / `unk_token`
// when known, and every key of chat_template_kwargs at the top level (they may not replace
// `messages`). Message shapes are passed through (string or content-part arrays, tool_calls,
// tool results, system/developer roles), except:
//   * parse_tool_arguments (default on, as vLLM does): an assistant tool call's
//     function.arguments JSON string is parsed into an object before rendering;
//   * sort_tool_keys (on for Kimi's tokenizer, whose apply_chat_template deep-sorts tools):
//     object keys of `tools` are sorted recursively.
// Errors are InvalidArgument: malformed messages, template syntax errors, runtime errors, and
// raise_exception() with the template's own message.
//
// A checkpoint in Kimi K3's format (xtml_renderer.h: config.json model_type kimi_k3, or the XTML
// control tokens and no template) gets the native XTML renderer instead of a Jinja template.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/template.h"
#include "engine/tokenizer/tokenizer.h"

namespace strata::engine {

struct ChatTemplateOptions {
  bool parse_tool_arguments = true;
  bool sort_tool_keys = false;
};

// An image's size as decoded (before any resize): what K3's media block names.
struct ImageSize {
  int width = 0;
  int height = 0;
};

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null, or an array of tool declarations
  bool add_generation_prompt = false;
  nlohmann::ordered_json kwargs;  // null, or an object of extra template variables
  // Image parts (Kimi K3): the size of the image an `image_url` part's URL holds (the caller
  // decoded it). Null: image parts are an error.
  std::function<absl::StatusOr<ImageSize>(const std::string& url)> image_size;
};

// One piece of a rendered prompt. A `control` piece is encoded with special-token text
// recognised: one XTML marker (its control id), or a Jinja template's whole output (whose
// markers are special-token text). Every other piece is encoded separately as ordinary text, so
// text that looks like a special token (in a user's message, a tool result) stays characters.
struct PromptSegment {
  std::string text;
  bool control = false;
};

// A prompt as text and as the segments that concatenate to it.
struct RenderedPrompt {
  std::string text;
  std::vector<PromptSegment> segments;
  // The URL of each image part, in prompt order: one media placeholder each.
  std::vector<std::string> image_urls;
};

// The prompt's ids, segment by segment (no BOS/EOS added).
std::vector<int32_t> EncodePrompt(const Tokenizer& tokenizer, const RenderedPrompt& prompt);

// Keeps the first `num_bytes` bytes of the prompt (text and segments alike; a segment cut in the
// middle keeps its kind). CHECK: num_bytes <= prompt->text.size().
void TruncatePrompt(RenderedPrompt* prompt, size_t num_bytes);

// Special-token strings exposed to the template.
struct ChatTemplateTokens {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
};

class ChatTemplate {
 public:
  static absl::StatusOr<ChatTemplate> Create(std::string_view source, ChatTemplateTokens tokens,
                                             ChatTemplateOptions options = {});

  // Kimi K3's native XTML renderer (xtml_renderer.h) behind the same interface.
  static ChatTemplate Xtml();

  // The tokenizer's template: "tool_use" when `with_tools` and present, else "default", else
  // the only one; the built-in Kimi template when the checkpoint has none. A K3 tokenizer
  // (UsesXtml) gets Xtml() instead; a kimi_k3 checkpoint with neither the XTML control tokens
  // nor a template is FailedPrecondition naming the missing token.
  // `source`, when given, replaces all of them (strata serve --chat-template), with the
  // tokenizer's special tokens and options.
  static absl::StatusOr<ChatTemplate> ForTokenizer(
      const Tokenizer& tokenizer, bool with_tools,
      std::optional<std::string_view> source = std::nullopt);

  // The prompt text (RenderPrompt's text).
  absl::StatusOr<std::string> Render(const ChatTemplateInputs& inputs) const;
  // The prompt as text and segments: XTML's segment list, or a Jinja template's output as one
  // control segment (EncodePrompt then matches special-token text in it, as before).
  absl::StatusOr<RenderedPrompt> RenderPrompt(const ChatTemplateInputs& inputs) const;

  // True for Xtml(): the prompt must be encoded segment-wise (EncodePrompt) and
  // chat_template_kwargs take K3's switches (ResolveXtmlSwitches).
  bool is_xtml() const { return xtml_; }

 private:
  absl::StatusOr<std::string> RenderJinja(const ChatTemplateInputs& inputs) const;

  bool xtml_ = false;
  std::shared_ptr<const jinja::Template> template_;  // null for XTML
  ChatTemplateTokens tokens_;
  ChatTemplateOptions options_;
};

// Strata's built-in Kimi-style template (the format docs/api.md describes): turns
// `<|im_{system,user,assistant}|>ROLE<|im_middle|>...<|im_end|>`, a default system turn, a
// tool_declare turn with compact JSON, tool calls in Kimi's section format, tool results as
// "## Return of ID". chat_template_kwargs: `thinking` (bool) opens `<think>` in the generation
// prompt.
std::string_view BuiltinKimiChatTemplate();

}  // namespace strata::engine
