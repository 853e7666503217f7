// An image on its way into a prompt: checked, decoded and cut into patches (PrepareImage, cheap,
// done where the request is parsed so a bad image is a 400 before any engine work), then run
// through the vision tower (EncodeImage) into the rows the language model reads.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/media/image_decode.h"
#include "engine/media/image_preprocess.h"
#include "engine/media_embedding.h"
#include "engine/vision/vision_encoder.h"

namespace strata::engine {

struct PreparedImage {
  media::ImagePatches patches;
  uint64_t content_key = 0;  // Sha256Prefix64 of the encoded bytes
  int64_t num_rows = 0;      // rows in the language model (media::NumMergedRows)
};

// Decodes and preprocesses `bytes` (PNG, JPEG, WebP, GIF). Errors are InvalidArgument naming the
// reason and the limit (engine/media/image_decode.h).
absl::StatusOr<PreparedImage> PrepareImage(std::string_view bytes, const VisionConfig& config,
                                           const media::ImageDecodeLimits& limits = {});

// The image's rows (position 0: ExpandMediaPlaceholders places it).
MediaEmbedding EncodeImage(const ImageEncoder& encoder, const PreparedImage& image,
                           const ImageEncoder::BeforeBlock& before_block = {});

}  // namespace strata::engine
