#include "engine/vision/image_input.h"

#include <memory>
#include <utility>

#include "core/sha256.h"
#include "core/status.h"

namespace strata::engine {

absl::StatusOr<PreparedImage> PrepareImage(std::string_view bytes, const VisionConfig& config,
                                           const media::ImageDecodeLimits& limits) {
  ASSIGN_OR_RETURN(const media::DecodedImage decoded, media::DecodeImage(bytes, limits));
  PreparedImage image;
  ASSIGN_OR_RETURN(image.patches, media::PreprocessImage(decoded, config));
  image.num_rows = media::NumMergedRows(image.patches, config);
  image.content_key = Sha256Prefix64(bytes);
  return image;
}

MediaEmbedding EncodeImage(const ImageEncoder& encoder, const PreparedImage& image,
                           const ImageEncoder::BeforeBlock& before_block) {
  MediaEmbedding m;
  m.num_rows = image.num_rows;
  m.content_key = image.content_key;
  m.rows = std::make_shared<const std::vector<float>>(encoder.Encode(image.patches, before_block));
  return m;
}

}  // namespace strata::engine
