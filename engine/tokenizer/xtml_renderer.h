// Kimi K3's prompt format ("XTML", docs/k3-format.md): OpenAI-style chat inputs -> the prompt
// text and the segments it is encoded from, as Moonshot's encoding_k3.py (build_chat_segments)
// renders them, byte for byte. K3 ships no Jinja chat template; this replaces one.
//
// Every element is `<|open|>tag attr="v"<|sep|>body<|close|>tag<|sep|>` (xtml_markers.h). The
// markers are control segments; tag names, each attribute piece (` key`, `="`, the escaped
// value, `"`) and each body text are separate ordinary segments, so a user's text that looks
// like a marker is never read as one.
//
// Prompt, in order: the tools declaration (request `tools`: null wrapper fields dropped, keys
// deep-sorted, compact JSON in a ```json fence), the thinking-effort system message (thinking
// on), the messages (developer -> system; a system message with `tools` is a dynamic
// declaration), the tool-choice message (kwargs tool_choice required / none), the
// response-format message (kwargs response_format json_object / json_schema), and the
// generation prompt (assistant message opened, then its think channel, or its response channel
// with thinking off).
//
// chat_template_kwargs read: thinking / enable_thinking (bool), thinking_effort (low|high|max),
// reasoning_effort (none|low|high|max), tool_choice, response_format, response_schema.
// An `image_url` content part becomes K3's media block with the image's size
// (ChatTemplateInputs::image_size; RenderedPrompt::image_urls lists them in prompt order).
// Errors are InvalidArgument naming the message, field or kwarg.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace strata::engine {

// K3's switches from chat_template_kwargs.
struct XtmlSwitches {
  bool thinking = true;
  std::string thinking_effort = "max";  // low, high or max
};

// thinking (else enable_thinking, else true; reasoning_effort "none" turns it off);
// thinking_effort (else reasoning_effort unless "none", else "max"). InvalidArgument naming the
// kwarg and the accepted values for a non-boolean switch or an unknown effort.
absl::StatusOr<XtmlSwitches> ResolveXtmlSwitches(const nlohmann::ordered_json& kwargs);

// The prompt for `inputs` (see the file comment).
absl::StatusOr<RenderedPrompt> RenderXtml(const ChatTemplateInputs& inputs);

// True when the tokenizer has the XTML control tokens (<|open|>, <|close|>, <|sep|>,
// <|end_of_msg|>) and either config.json's model_type is kimi_k3 or there is no chat template.
// (A kimi_k3 checkpoint without the control tokens but with a template of its own, like the demo
// checkpoint's K2-style one, keeps that template.)
bool UsesXtml(const Tokenizer& tokenizer);

// FailedPrecondition naming the first XTML control token the tokenizer lacks as a special token.
absl::Status CheckXtmlControlTokens(const Tokenizer& tokenizer);

}  // namespace strata::engine
