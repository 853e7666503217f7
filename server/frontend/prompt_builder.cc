#include "server/frontend/prompt_builder.h"

#include <algorithm>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "engine/tokenizer/xtml_renderer.h"
#include "server/frontend/api_error.h"
#include "server/frontend/image_inputs.h"

namespace strata::frontend {

absl::Status RequireTokenizer(const ServedModel& model, std::string_view param) {
  if (!model.skip_tokenizer_init) return absl::OkStatus();
  return InvalidField(param,
                      absl::StrCat("this server was started with --skip-tokenizer-init: send "
                                   "token ids ('prompt' as an array of token ids on "
                                   "/v1/completions); '",
                                   std::string(param), "' needs the tokenizer"),
                      "unsupported_value");
}

absl::Status CheckFieldsWithoutTokenizer(const ServedModel& model, const GenerationFields& gen) {
  if (!gen.stop.empty()) return RequireTokenizer(model, "stop");
  if (!gen.bad_words.empty()) return RequireTokenizer(model, "bad_words");
  if (gen.constrained()) return RequireTokenizer(model, "response_format");
  return absl::OkStatus();
}

namespace {

// K3's chat_template_kwargs (engine/tokenizer/xtml_renderer.h): its switches checked (a 400
// naming the kwarg and the accepted values), and the request's tool_choice and response_format
// added as vLLM's K3 renderer adds them (required / none and json_object / json_schema write a
// system message; a named choice writes none, whatever the kwargs said).
absl::StatusOr<Json> XtmlKwargs(const ChatCompletionRequest& request) {
  Json kwargs =
      request.chat_template_kwargs.is_object() ? request.chat_template_kwargs : Json::object();
  absl::StatusOr<engine::XtmlSwitches> switches = engine::ResolveXtmlSwitches(kwargs);
  if (!switches.ok()) {
    const bool top_level = request.reasoning_effort.has_value() &&
                           absl::StrContains(switches.status().message(), "reasoning_effort");
    return InvalidField(top_level ? "reasoning_effort" : "chat_template_kwargs",
                        std::string(switches.status().message()));
  }
  switch (request.tool_choice) {
    case ToolChoice::kRequired:
      kwargs["tool_choice"] = "required";
      break;
    case ToolChoice::kNone:
      kwargs["tool_choice"] = "none";
      break;
    case ToolChoice::kNamed:
      kwargs.erase("tool_choice");
      break;
    case ToolChoice::kAuto:
      break;
  }
  if (!request.response_format.is_null()) kwargs["response_format"] = request.response_format;
  return kwargs;
}

// The request's images, decoded and cut into patches, by URL (a URL sent twice is one image).
// Shared: an image's patches (up to ~150 MB) are never copied, even when its URL repeats.
using ImagesByUrl = std::map<std::string, std::shared_ptr<const engine::PreparedImage>>;

absl::StatusOr<ImagesByUrl> PrepareChatImages(const ServedModel& model,
                                              const ChatCompletionRequest& request) {
  ImagesByUrl images;
  const std::vector<ImagePart> parts = FindImageParts(request.messages);
  if (parts.empty()) return images;
  if (model.images == nullptr) {
    return InvalidField(parts[0].param,
                        "this model has no vision tower: image input needs a Kimi K3 checkpoint "
                        "with a vision_config",
                        "unsupported_value");
  }
  const int most = model.images->limits().max_images_per_request;
  if (static_cast<int64_t>(parts.size()) > most) {
    return InvalidField("messages", absl::StrCat("the request has ", parts.size(),
                                                 " images; at most ", most, " are accepted"));
  }
  if (request.gen.truncate_prompt_tokens) {
    return InvalidField("truncate_prompt_tokens",
                        "'truncate_prompt_tokens' cannot be used with images (it could cut an "
                        "image's rows)");
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    if (images.contains(parts[i].url)) continue;
    ASSIGN_OR_RETURN(
        engine::PreparedImage image,
        model.images->Prepare(parts[i].url, parts[i].param, absl::StrCat("image ", i + 1)));
    images.emplace(parts[i].url, std::make_shared<const engine::PreparedImage>(std::move(image)));
  }
  return images;
}

// The prompt as text and segments (ChatTemplate::RenderPrompt), cut for continue_final_message;
// image parts become media blocks naming their images' sizes.
absl::StatusOr<engine::RenderedPrompt> RenderChatPrompt(const ServedModel& model,
                                                        const ChatCompletionRequest& request,
                                                        const ImagesByUrl& images) {
  RETURN_IF_ERROR(RequireTokenizer(model, "messages"));
  const bool with_tools = request.tools.is_array() && !request.tools.empty();
  const engine::ChatTemplate* chat_template =
      with_tools ? model.chat_template_tools : model.chat_template;
  if (chat_template == nullptr) {
    return InvalidField("messages", "this model has no chat template; use /v1/completions",
                        "unsupported_value");
  }
  engine::ChatTemplateInputs inputs;
  inputs.messages = request.messages;
  if (with_tools) inputs.tools = request.tools;
  inputs.add_generation_prompt = request.add_generation_prompt;
  if (!images.empty()) {
    inputs.image_size = [&images](const std::string& url) -> absl::StatusOr<engine::ImageSize> {
      const engine::PreparedImage& image = *images.at(url);
      return engine::ImageSize{image.patches.original_width, image.patches.original_height};
    };
  }
  if (chat_template->is_xtml()) {
    ASSIGN_OR_RETURN(inputs.kwargs, XtmlKwargs(request));
  } else {
    inputs.kwargs = request.chat_template_kwargs;
  }
  absl::StatusOr<engine::RenderedPrompt> prompt = chat_template->RenderPrompt(inputs);
  if (!prompt.ok()) {
    return InvalidField("messages",
                        absl::StrCat(chat_template->is_xtml() ? "cannot render the Kimi K3 prompt: "
                                                              : "cannot render the chat template: ",
                                     prompt.status().message()));
  }
  if (!request.continue_final_message) return prompt;
  // Cut after the final message's content, wherever the template put it last.
  const std::string& content = request.final_message_text;
  const size_t at = prompt->text.rfind(content);
  if (content.empty() || at == std::string::npos) {
    return InvalidField("continue_final_message",
                        "the chat template does not show the final message's content verbatim, "
                        "so it cannot be continued");
  }
  engine::TruncatePrompt(&*prompt, at + content.size());
  return prompt;
}

}  // namespace

absl::StatusOr<std::string> RenderChat(const ServedModel& model,
                                       const ChatCompletionRequest& request) {
  ASSIGN_OR_RETURN(const ImagesByUrl images, PrepareChatImages(model, request));
  ASSIGN_OR_RETURN(engine::RenderedPrompt prompt, RenderChatPrompt(model, request, images));
  return std::move(prompt.text);
}

absl::StatusOr<std::vector<int32_t>> ChatPromptIds(const ServedModel& model,
                                                   const ChatCompletionRequest& request) {
  ASSIGN_OR_RETURN(ChatPrompt prompt, BuildChatPrompt(model, request));
  return std::move(prompt.ids);
}

absl::StatusOr<ChatPrompt> BuildChatPrompt(const ServedModel& model,
                                           const ChatCompletionRequest& request) {
  ASSIGN_OR_RETURN(ImagesByUrl images, PrepareChatImages(model, request));
  ASSIGN_OR_RETURN(engine::RenderedPrompt prompt, RenderChatPrompt(model, request, images));
  // Segment by segment: a Jinja template's output is one segment whose special-token text
  // becomes special tokens; K3's markers are control segments and all other text (the user's
  // included) stays ordinary text.
  std::vector<int32_t> ids = engine::EncodePrompt(*model.tokenizer, prompt);
  if (model.reply_tokens != nullptr) {
    model.reply_tokens->Splice(request.messages, &ids);
  }
  RETURN_IF_ERROR(TruncatePrompt(model, request.gen.truncate_prompt_tokens, &ids));
  ChatPrompt out;
  if (!prompt.image_urls.empty()) {
    // Each image's placeholder expands to one position per row of the image.
    for (const std::string& url : prompt.image_urls) {
      const engine::PreparedImage& image = *images.at(url);
      out.images.push_back(images.at(url));
      engine::MediaEmbedding m;
      m.num_rows = image.num_rows;
      m.content_key = image.content_key;
      out.media.push_back(std::move(m));
    }
    absl::StatusOr<std::vector<int32_t>> expanded =
        engine::ExpandMediaPlaceholders(ids, model.images->placeholder_id(), &out.media);
    if (!expanded.ok()) return InvalidField("messages", std::string(expanded.status().message()));
    ids = std::move(*expanded);
  }
  RETURN_IF_ERROR(CheckPromptIds(model, ids, "messages"));
  out.ids = std::move(ids);
  return out;
}

std::shared_ptr<ImageEncodeJob> EncodeChatImages(const ServedModel& model, ChatPrompt* prompt) {
  if (prompt->images.empty()) return nullptr;
  std::shared_ptr<ImageEncodeJob> job =
      model.images->EncodeInBackground(std::move(prompt->images), prompt->media);
  prompt->images.clear();
  if (!job->done()) return job;
  prompt->media = job->media();
  return nullptr;
}

absl::StatusOr<std::vector<int32_t>> TextPromptIds(const ServedModel& model, std::string_view text,
                                                   bool add_special_tokens,
                                                   std::string_view param) {
  RETURN_IF_ERROR(RequireTokenizer(model, param));
  engine::EncodeOptions options;
  options.add_special_tokens = add_special_tokens;
  options.parse_special = true;
  return model.tokenizer->Encode(text, options);
}

absl::Status TruncatePrompt(const ServedModel& model, std::optional<int64_t> keep,
                            std::vector<int32_t>* ids) {
  if (!keep) return absl::OkStatus();
  const int64_t most = model.max_model_len - 1;
  if (*keep > most) {
    return InvalidField("truncate_prompt_tokens",
                        absl::StrCat("'truncate_prompt_tokens' (", *keep,
                                     ") must be at most the context length less one output "
                                     "token (",
                                     most, "); -1 keeps as many as fit"));
  }
  const size_t n = static_cast<size_t>(*keep < 0 ? most : *keep);
  if (ids->size() > n) ids->erase(ids->begin(), ids->end() - static_cast<std::ptrdiff_t>(n));
  return absl::OkStatus();
}

absl::Status CheckPromptIds(const ServedModel& model, const std::vector<int32_t>& ids,
                            std::string_view param) {
  if (ids.empty()) return InvalidField(param, "the prompt is empty (0 tokens)");
  for (int32_t id : ids) {
    if (id < 0 || id >= model.vocab_size) {
      return InvalidField(
          param, absl::StrCat("the prompt has token id ", id,
                              ", outside the model's vocabulary [0, ", model.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ResolveMaxTokens(const ServedModel& model, int64_t num_prompt_tokens,
                                         std::optional<int64_t> max_tokens,
                                         std::string_view prompt_param) {
  const int64_t limit = model.max_model_len;
  if (num_prompt_tokens >= limit) {
    return InvalidField(prompt_param,
                        absl::StrCat("This model's maximum context length is ", limit,
                                     " tokens. However, your prompt has ", num_prompt_tokens,
                                     " tokens (it must leave room for at least one output "
                                     "token). Please reduce the length of the prompt."),
                        "context_length_exceeded");
  }
  if (!max_tokens) {
    // Up to the context left, or the model's max_new_tokens (generation_config.json) if less.
    return std::min(limit - num_prompt_tokens,
                    model.generation_config.defaults.max_tokens.value_or(limit));
  }
  if (num_prompt_tokens + *max_tokens > limit) {
    return InvalidField(
        "max_tokens",
        absl::StrCat("This model's maximum context length is ", limit,
                     " tokens. However, you requested ", num_prompt_tokens + *max_tokens,
                     " tokens (", num_prompt_tokens, " in the prompt, ", *max_tokens,
                     " for the completion: max_tokens ", *max_tokens, " > ", limit, " - ",
                     num_prompt_tokens, ")."),
        "context_length_exceeded");
  }
  return *max_tokens;
}

}  // namespace strata::frontend
