// generate_request.h: proto → REST body → the shared front-end validation.
#include "server/grpc/generate_request.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/json_limits.h"
#include "core/status.h"
#include "engine/media_embedding.h"
#include "engine/vision/image_input.h"
#include "server/frontend/engine_request.h"
#include "server/frontend/generation_response.h"
#include "server/frontend/image_inputs.h"
#include "server/frontend/prompt_builder.h"
#include "server/grpc/completion_body.h"

namespace strata::rpc {
namespace {

// The request's images (GenerateRequest.images), decoded and cut into patches, in order: every
// check that can refuse them runs here, before the prompt is expanded and before any tower work.
absl::StatusOr<std::vector<engine::PreparedImage>> PrepareImages(
    const frontend::ServedModel& model, const v1::GenerateRequest& request) {
  std::vector<engine::PreparedImage> images;
  if (request.images().empty()) return images;
  if (model.images == nullptr) {
    return absl::InvalidArgumentError(
        "images: this model has no vision tower: image input needs a Kimi K3 checkpoint with a "
        "vision_config");
  }
  const frontend::ImageInputLimits& limits = model.images->limits();
  if (request.images_size() > limits.max_images_per_request) {
    return absl::InvalidArgumentError(absl::StrCat("images: the request has ",
                                                   request.images_size(), " images; at most ",
                                                   limits.max_images_per_request, " are accepted"));
  }
  images.reserve(static_cast<size_t>(request.images_size()));
  for (int i = 0; i < request.images_size(); ++i) {
    const std::string param = absl::StrCat("images[", i, "]");
    const std::string& bytes = request.images(i);
    if (bytes.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(param, ": the image is empty"));
    }
    if (static_cast<int64_t>(bytes.size()) > limits.max_image_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(param, ": the image file has ", bytes.size(),
                                                     " bytes; at most ", limits.max_image_bytes,
                                                     " are accepted"));
    }
    // The message starts with `param` ("images[1]: not an image: ...").
    ASSIGN_OR_RETURN(engine::PreparedImage image,
                     model.images->PrepareBytes(bytes, param, /*what=*/param));
    images.push_back(std::move(image));
  }
  return images;
}

// Expands the i-th media placeholder of `prompt` to images[i]'s rows (one position per row) and
// returns the images' embeddings with their positions (rows not yet encoded).
absl::StatusOr<std::vector<engine::MediaEmbedding>> PlaceImages(
    const frontend::ServedModel& model, const std::vector<engine::PreparedImage>& images,
    std::vector<int32_t>* prompt) {
  std::vector<engine::MediaEmbedding> media;
  if (images.empty()) return media;
  for (const engine::PreparedImage& image : images) {
    engine::MediaEmbedding m;
    m.num_rows = image.num_rows;
    m.content_key = image.content_key;
    media.push_back(std::move(m));
  }
  absl::StatusOr<std::vector<int32_t>> expanded =
      engine::ExpandMediaPlaceholders(*prompt, model.images->placeholder_id(), &media);
  if (!expanded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt: ", expanded.status().message()));
  }
  *prompt = *std::move(expanded);
  return media;
}

}  // namespace

absl::StatusOr<GrpcGeneration> BuildGeneration(const frontend::ServedModel& model,
                                               const frontend::RequestLimits& limits,
                                               const v1::GenerateRequest& request,
                                               const std::function<bool()>& cancelled) {
  frontend::RequestLimits model_limits = limits;
  model_limits.vocab_size = model.vocab_size;
  model_limits.defaults = model.generation_config.defaults;
  // The schema text is parsed once, within the limits of core/json_limits.h.
  frontend::Json schema;
  if (!request.json_schema().empty()) {
    absl::StatusOr<frontend::Json> parsed = ParseBoundedJson(request.json_schema());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          IsJsonLimitError(parsed.status())
              ? absl::StrCat("json_schema: ", parsed.status().message())
              : absl::StrCat("json_schema is not valid JSON text: ", parsed.status().message()));
    }
    schema = *std::move(parsed);
  }
  if (request.has_max_tokens() && request.max_tokens() == 0) {  // REST's message names 'echo'
    return absl::InvalidArgumentError("'max_tokens' must be at least 1; got 0");
  }
  ASSIGN_OR_RETURN(
      frontend::CompletionRequest req,
      frontend::ParseCompletionRequest(CompletionBody(request, std::move(schema)), model_limits));
  if (!req.gen.model.empty() &&
      std::find(model.names.begin(), model.names.end(), req.gen.model) == model.names.end()) {
    return absl::NotFoundError(absl::StrCat("The model '", req.gen.model, "' does not exist."));
  }
  RETURN_IF_ERROR(frontend::CheckFieldsWithoutTokenizer(model, req.gen));
  const frontend::PromptInput& input = req.prompts.at(0);
  std::vector<int32_t> prompt = input.token_ids;
  if (input.text) {
    ASSIGN_OR_RETURN(prompt,
                     frontend::TextPromptIds(model, *input.text, /*add_special_tokens=*/true));
  }
  ASSIGN_OR_RETURN(std::vector<engine::PreparedImage> images, PrepareImages(model, request));
  ASSIGN_OR_RETURN(std::vector<engine::MediaEmbedding> media, PlaceImages(model, images, &prompt));
  RETURN_IF_ERROR(frontend::CheckPromptIds(model, prompt, "prompt"));
  ASSIGN_OR_RETURN(int64_t max_tokens,
                   frontend::ResolveMaxTokens(model, static_cast<int64_t>(prompt.size()),
                                              req.gen.max_tokens, "prompt"));
  // The vision tower (or its cache) runs once per image, after every check that can refuse the
  // request, on the encoder thread in turn with the HTTP API's images (one image's working
  // memory at a time); this gRPC thread waits, and a client that leaves meanwhile (cancel,
  // deadline) takes its images out of the queue. The choices share the rows.
  if (!images.empty()) {
    std::vector<std::shared_ptr<const engine::PreparedImage>> queued;
    for (engine::PreparedImage& image : images) {
      queued.push_back(std::make_shared<const engine::PreparedImage>(std::move(image)));
    }
    images.clear();
    std::shared_ptr<frontend::ImageEncodeJob> job =
        model.images->EncodeInBackground(std::move(queued), std::move(media));
    while (!job->WaitFor(std::chrono::milliseconds(10))) {
      if (cancelled && cancelled()) {
        job->Cancel();
        return absl::CancelledError("the client left while its images were being encoded");
      }
    }
    media = job->media();
  }
  GrpcGeneration g;
  g.request_id = req.gen.request_id.empty() ? frontend::NewResponseId("grpc") : req.gen.request_id;
  g.detokenize = !request.has_detokenize() || request.detokenize();
  g.return_progress = request.return_progress();
  const auto filters = frontend::TokenFilters(model, req.gen);
  for (int i = 0; i < req.gen.n; ++i) {
    GrpcChoice choice;
    choice.index = i;
    choice.request = frontend::EngineRequest(model, req.gen, prompt, max_tokens, g.request_id, i,
                                             /*chat=*/false);
    choice.options = frontend::OptionsFor(req.gen, choice.request, /*parse_tool_calls=*/false);
    choice.request.media = media;
    frontend::AddTokenFilters(filters, &choice.request);
    choice.request.report_prefill_progress = g.return_progress;
    g.choices.push_back(std::move(choice));
  }
  return g;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace strata::rpc
