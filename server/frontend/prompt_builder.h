// Prompts as token ids: chat messages through the model's chat template, completion prompts
// through the tokenizer; and the context-length rules (vLLM's) that decide max_tokens:
//   prompt_tokens >= max_model_len                 → 400 context_length_exceeded (prompt param)
//   prompt_tokens + max_tokens > max_model_len     → 400 context_length_exceeded (max_tokens)
//   max_tokens absent                              → max_model_len − prompt_tokens
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/media_embedding.h"
#include "engine/vision/image_input.h"
#include "server/frontend/image_inputs.h"
#include "server/frontend/openai_request.h"
#include "server/frontend/served_model.h"

namespace strata::frontend {

// Renders the request's messages with the chat template (tools declared when it has any), with
// the generation prompt unless add_generation_prompt is false; with continue_final_message the
// text ends right after the final message's content (its end-of-turn markers cut), so the
// model continues that message (vLLM). ChatPromptIds tokenizes the prompt segment by segment
// (engine::EncodePrompt: a Jinja template's special-token text becomes special tokens; a Kimi K3
// prompt's markers become control ids while message text stays ordinary text), and gives
// replies the model generated their generated ids (model.reply_tokens, reply_tokens.h). A K3
// model (ChatTemplate::is_xtml) also takes the request's tool_choice and response_format into
// the prompt, and its switches in chat_template_kwargs / reasoning_effort are checked (400
// naming the accepted values). Without a tokenizer: RequireTokenizer's 400 ("messages").
absl::StatusOr<std::string> RenderChat(const ServedModel& model,
                                       const ChatCompletionRequest& request);
absl::StatusOr<std::vector<int32_t>> ChatPromptIds(const ServedModel& model,
                                                   const ChatCompletionRequest& request);

// A chat prompt with its images (docs/vision.md): each `image_url` part is decoded and cut into
// patches (a 400 naming the part when it cannot be; a 400 when the model has no vision tower,
// for more than ImageInputLimits::max_images_per_request images, or with
// truncate_prompt_tokens), rendered as K3's media block, and its placeholder expanded to one
// position per image row. `media` are the images in prompt order with their positions; their
// rows are filled by EncodeChatImages.
struct ChatPrompt {
  std::vector<int32_t> ids;
  std::vector<std::shared_ptr<const engine::PreparedImage>> images;  // in prompt order
  std::vector<engine::MediaEmbedding> media;                         // in prompt order
};
absl::StatusOr<ChatPrompt> BuildChatPrompt(const ServedModel& model,
                                           const ChatCompletionRequest& request);
// The rows of each image of `prompt` (model.images is set when the prompt has images): from the
// encoder cache into prompt->media at once (nullptr returned: nothing to wait for), else a job
// on the encoder thread that gives the media their rows (the patches leave the prompt).
std::shared_ptr<ImageEncodeJob> EncodeChatImages(const ServedModel& model, ChatPrompt* prompt);

// A 400 naming `param` and --skip-tokenizer-init when the model is served without its
// tokenizer (ServedModel::skip_tokenizer_init): what `param` holds needs one.
absl::Status RequireTokenizer(const ServedModel& model, std::string_view param);
// The generation fields that need a tokenizer (stop strings, bad_words, a constrained output)
// when the model is served without one: a 400 naming the first one set.
absl::Status CheckFieldsWithoutTokenizer(const ServedModel& model, const GenerationFields& gen);

// Text (at request field `param`) of a completion prompt as ids (special-token text parsed as
// vLLM does for completions); RequireTokenizer's 400 without a tokenizer.
absl::StatusOr<std::vector<int32_t>> TextPromptIds(const ServedModel& model, std::string_view text,
                                                   bool add_special_tokens,
                                                   std::string_view param = "prompt");

// vLLM's truncate_prompt_tokens: keeps the last `keep` ids (−1: max_model_len − 1, room for
// one output token). 400 naming it when `keep` exceeds the context (max_model_len − 1).
absl::Status TruncatePrompt(const ServedModel& model, std::optional<int64_t> keep,
                            std::vector<int32_t>* ids);

// 400 naming `param` for an empty prompt or an id outside the model's vocabulary.
absl::Status CheckPromptIds(const ServedModel& model, const std::vector<int32_t>& ids,
                            std::string_view param);

absl::StatusOr<int64_t> ResolveMaxTokens(const ServedModel& model, int64_t num_prompt_tokens,
                                         std::optional<int64_t> max_tokens,
                                         std::string_view prompt_param);

}  // namespace strata::frontend
