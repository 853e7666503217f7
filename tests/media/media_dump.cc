// Test-only: what strata_media makes of one image file, as .npy files for
// tests/media/pil_compare_test.py to compare with Pillow.
//
//   media_dump IMAGE OUT_DIR [IN_PATCH_LIMIT]
//
// Writes OUT_DIR/decoded.npy ([H, W, C] f32, the decoded 8-bit values), OUT_DIR/resized.npy
// (the same after the resize of the preprocessing, before the chessboard; equal to decoded when
// within the budget), OUT_DIR/patches.npy ([N, 3·p·p], PreprocessImage's output) and prints
// one JSON line: format, has_alpha, the sizes and the grid. IN_PATCH_LIMIT replaces the released
// 65,536 so small images are over the budget. Exit 1 with the error on bad input.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "core/file.h"
#include "core/npy.h"
#include "engine/media/bicubic_resize.h"
#include "engine/media/image_decode.h"
#include "engine/media/image_preprocess.h"
#include "engine/vision/vision_config.h"

namespace {

using strata::media::DecodedImage;

absl::Status WritePixels(const std::string& path, const std::vector<uint8_t>& pixels, int width,
                         int height, int channels) {
  const std::vector<float> values(pixels.begin(), pixels.end());
  return strata::WriteNpyF32(path, values.data(), {height, width, channels});
}

std::vector<uint8_t> Resized(const DecodedImage& image, strata::media::ImageSize size) {
  if (size.width == image.width && size.height == image.height) return image.pixels;
  if (image.has_alpha) {
    return strata::media::ResizeBicubicStraightAlpha(image.pixels, image.width, image.height,
                                                     size.width, size.height);
  }
  return strata::media::ResizeBicubic(image.pixels, image.width, image.height, 3, size.width,
                                      size.height);
}

absl::Status Run(const std::string& image_path, const std::string& out_dir,
                 const strata::engine::VisionConfig& config) {
  absl::StatusOr<std::string> bytes = strata::ReadFileToString(image_path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<DecodedImage> image = strata::media::DecodeImage(*bytes);
  if (!image.ok()) return image.status();
  const int channels = image->has_alpha ? 4 : 3;
  absl::Status status =
      WritePixels(out_dir + "/decoded.npy", image->pixels, image->width, image->height, channels);
  if (!status.ok()) return status;
  const strata::media::ImageSize size =
      strata::media::ResizedSize(image->width, image->height, config);
  status = WritePixels(out_dir + "/resized.npy", Resized(*image, size), size.width, size.height,
                       channels);
  if (!status.ok()) return status;
  absl::StatusOr<strata::media::ImagePatches> patches =
      strata::media::PreprocessImage(*image, config);
  if (!patches.ok()) return patches.status();
  const int64_t patch_floats = int64_t{3} * config.patch_size * config.patch_size;
  status = strata::WriteNpyF32(out_dir + "/patches.npy", patches->patches.data(),
                               {patches->num_patches(), patch_floats});
  if (!status.ok()) return status;
  std::printf(
      "{\"format\": \"%s\", \"has_alpha\": %s, \"width\": %d, \"height\": %d, "
      "\"resized_width\": %d, \"resized_height\": %d, \"grid_height\": %d, \"grid_width\": %d, "
      "\"merged_rows\": %lld}\n",
      image->format.c_str(), image->has_alpha ? "true" : "false", image->width, image->height,
      patches->width, patches->height, patches->grid_height, patches->grid_width,
      static_cast<long long>(strata::media::NumMergedRows(*patches, config)));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: media_dump IMAGE OUT_DIR [IN_PATCH_LIMIT]\n");
    return 2;
  }
  strata::engine::VisionConfig config;
  if (argc == 4 &&
      (!absl::SimpleAtoi(argv[3], &config.in_patch_limit) || config.in_patch_limit < 1)) {
    std::fprintf(stderr, "media_dump: IN_PATCH_LIMIT must be a positive integer\n");
    return 2;
  }
  const absl::Status status = Run(argv[1], argv[2], config);
  if (!status.ok()) {
    std::fprintf(stderr, "media_dump: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
