// libFuzzer target: DecodeImage on arbitrary bytes (PNG, JPEG, WebP, GIF by their magic; built
// by tests/fuzz/run_fuzz.sh), then PreprocessImage of what decodes, over a small patch budget so
// the resize, chessboard and patch code run on every decoded shape. Limits are small so one
// input stays fast; a decode must match its header's size and never exceed them.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "engine/media/image_decode.h"
#include "engine/media/image_preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  strata::media::ImageDecodeLimits limits;
  limits.max_encoded_bytes = 1 << 20;
  limits.max_side_pixels = 2048;
  limits.max_pixels = 1 << 20;
  auto image = strata::media::DecodeImage(bytes, limits);
  if (!image.ok()) {
    CHECK(image.status().code() == absl::StatusCode::kInvalidArgument) << image.status();
    CHECK(!image.status().message().empty());
    return 0;
  }
  CHECK(image->width >= 1 && image->width <= limits.max_side_pixels);
  CHECK(image->height >= 1 && image->height <= limits.max_side_pixels);
  CHECK_LE(int64_t{image->width} * image->height, limits.max_pixels);
  CHECK_EQ(image->pixels.size(),
           size_t{static_cast<size_t>(image->width)} * image->height * (image->has_alpha ? 4 : 3));

  strata::engine::VisionConfig config;
  config.in_patch_limit = 64;
  config.patch_limit_on_one_side = 32;
  auto patches = strata::media::PreprocessImage(*image, config);
  CHECK(patches.ok()) << patches.status();
  CHECK_LE(patches->width, config.max_side_pixels());
  CHECK_LE(patches->height, config.max_side_pixels());
  CHECK_EQ(patches->patches.size(), static_cast<size_t>(patches->num_patches()) * 3 * 14 * 14);
  CHECK_EQ(patches->grid_height % config.merge_height, 0);
  CHECK_EQ(patches->grid_width % config.merge_width, 0);
  for (const float x : patches->patches) CHECK(x >= -1.0f && x <= 1.0f) << x;
  return 0;
}
