// Kimi K3's preprocessing (engine/media/image_preprocess.h; docs/vision-preprocessing.md):
// resize when over the budget → composite transparency over the chessboard → zero-pad to whole
// merge windows → normalise → patchify.
#include "engine/media/image_preprocess.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "engine/media/bicubic_resize.h"

namespace strata::media {
namespace {

// The background transparency is composited over: 8×8-pixel squares, white (255) where
// (x / 8 + y / 8) is even — the square at the top-left corner — and gray (180) elsewhere.
constexpr int kChessboardSquarePixels = 8;
constexpr uint8_t kChessboardWhite = 255;
constexpr uint8_t kChessboardGray = 180;

uint8_t ChessboardAt(int x, int y) {
  const int square = x / kChessboardSquarePixels + y / kChessboardSquarePixels;
  return square % 2 == 0 ? kChessboardWhite : kChessboardGray;
}

absl::Status ValidatePreprocessConfig(const engine::VisionConfig& config) {
  if (config.patch_size < 1 || config.merge_height < 1 || config.merge_width < 1 ||
      config.in_patch_limit < 1 || config.patch_limit_on_one_side < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vision config: patch_size (", config.patch_size, "), merge_kernel_size (",
        config.merge_height, ", ", config.merge_width, "), in_patch_limit (", config.in_patch_limit,
        ") and patch_limit_on_one_side (", config.patch_limit_on_one_side, ") must all be >= 1"));
  }
  for (const float std : config.image_std) {
    if (!(std != 0.0f) || !std::isfinite(std)) {
      return absl::InvalidArgumentError("vision config: image_std must be finite and non-zero");
    }
  }
  return absl::OkStatus();
}

// The decoded image at `size` (itself when the size is unchanged): antialiased bicubic, RGBA
// through premultiplied alpha (engine/media/bicubic_resize.h).
DecodedImage ResizeImage(const DecodedImage& image, ImageSize size) {
  if (size.width == image.width && size.height == image.height) return image;
  DecodedImage out;
  out.width = size.width;
  out.height = size.height;
  out.has_alpha = image.has_alpha;
  out.format = image.format;
  out.pixels = image.has_alpha ? ResizeBicubicStraightAlpha(image.pixels, image.width, image.height,
                                                            size.width, size.height)
                               : ResizeBicubic(image.pixels, image.width, image.height, 3,
                                               size.width, size.height);
  return out;
}

// RGBA → RGB over the chessboard: round((c · a + board · (255 − a)) / 255), in integers (as
// Pillow's paste with an alpha mask computes it).
std::vector<uint8_t> CompositeOnChessboard(const DecodedImage& image) {
  CHECK(image.has_alpha);
  std::vector<uint8_t> rgb(static_cast<size_t>(image.width) * image.height * 3);
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      const size_t i = static_cast<size_t>(y) * image.width + x;
      const int alpha = image.pixels[i * 4 + 3];
      const int board = ChessboardAt(x, y);
      for (int c = 0; c < 3; ++c) {
        const int t = image.pixels[i * 4 + c] * alpha + board * (255 - alpha) + 128;
        rgb[i * 3 + c] = static_cast<uint8_t>(((t >> 8) + t) >> 8);
      }
    }
  }
  return rgb;
}

// x = (pixel / 255 − mean[c]) / std[c] for every 8-bit value, computed in double and rounded
// once to f32.
std::array<std::array<float, 256>, 3> NormalisationTable(const engine::VisionConfig& config) {
  std::array<std::array<float, 256>, 3> table;
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      table[c][v] = static_cast<float>((v / 255.0 - static_cast<double>(config.image_mean[c])) /
                                       static_cast<double>(config.image_std[c]));
    }
  }
  return table;
}

// Pads `rgb` (width × height) with pixel 0 to grid × patch on each side and cuts it into
// patches: [grid_height · grid_width, 3 · p · p], row-major over the grid, each (c, dy, dx).
std::vector<float> Patchify(const std::vector<uint8_t>& rgb, int width, int height, int grid_height,
                            int grid_width, const engine::VisionConfig& config) {
  const auto table = NormalisationTable(config);
  const int p = config.patch_size;
  const size_t patch_floats = static_cast<size_t>(3) * p * p;
  std::vector<float> patches(static_cast<size_t>(grid_height) * grid_width * patch_floats);
  float* out = patches.data();
  for (int gy = 0; gy < grid_height; ++gy) {
    for (int gx = 0; gx < grid_width; ++gx) {
      const int valid_x = std::clamp(width - gx * p, 0, p);  // the rest of the row is padding
      for (int c = 0; c < 3; ++c) {
        const std::array<float, 256>& values = table[c];
        for (int dy = 0; dy < p; ++dy) {
          const int y = gy * p + dy;
          int dx = 0;
          if (y < height) {
            const uint8_t* src = &rgb[(static_cast<size_t>(y) * width + gx * p) * 3 + c];
            for (; dx < valid_x; ++dx) *out++ = values[src[dx * 3]];
          }
          for (; dx < p; ++dx) *out++ = values[0];
        }
      }
    }
  }
  return patches;
}

int RoundUp(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

ImageSize ResizedSize(int width, int height, const engine::VisionConfig& config) {
  CHECK(width >= 1 && height >= 1) << width << "x" << height;
  const int p = config.patch_size;
  const int max_side = config.max_side_pixels();
  // The release's arithmetic in doubles, in its order (Python floats; `//` on the sides).
  const double patches =
      static_cast<double>(std::max(1, width / p)) * static_cast<double>(std::max(1, height / p));
  const double s1 = std::sqrt(static_cast<double>(config.in_patch_limit) / patches);
  const double s2 = static_cast<double>(max_side) / width;
  const double s3 = static_cast<double>(max_side) / height;
  const double scale = std::min({1.0, s1, s2, s3});
  const auto side = [&](int length) {
    return std::min(std::max(1, static_cast<int>(length * scale)), max_side);
  };
  return ImageSize{side(width), side(height)};
}

int64_t NumMergedRows(const ImagePatches& image, const engine::VisionConfig& config) {
  return int64_t{image.grid_height / config.merge_height} * (image.grid_width / config.merge_width);
}

absl::StatusOr<ImagePatches> PreprocessImage(const DecodedImage& image,
                                             const engine::VisionConfig& config) {
  absl::Status config_ok = ValidatePreprocessConfig(config);
  if (!config_ok.ok()) return config_ok;
  CHECK(image.width >= 1 && image.height >= 1) << image.width << "x" << image.height;
  CHECK_EQ(image.pixels.size(),
           static_cast<size_t>(image.width) * image.height * (image.has_alpha ? 4 : 3));
  ImagePatches out;
  out.original_width = image.width;
  out.original_height = image.height;
  const ImageSize size = ResizedSize(image.width, image.height, config);
  out.width = size.width;
  out.height = size.height;
  // Bounded by construction: each side is at most max_side_pixels, so the grid is at most
  // patch_limit_on_one_side (rounded up to whole merge windows) patches along each side. The
  // patch count itself may pass in_patch_limit by the padding (up to ~2.6% at the released
  // budget, as in the release), so it is not checked against it.
  const int max_grid_height = RoundUp(config.patch_limit_on_one_side, config.merge_height);
  const int max_grid_width = RoundUp(config.patch_limit_on_one_side, config.merge_width);
  out.grid_height =
      RoundUp(size.height, config.patch_size * config.merge_height) / config.patch_size;
  out.grid_width = RoundUp(size.width, config.patch_size * config.merge_width) / config.patch_size;
  CHECK_LE(out.grid_height, max_grid_height);
  CHECK_LE(out.grid_width, max_grid_width);

  const DecodedImage resized = ResizeImage(image, size);
  const std::vector<uint8_t> rgb =
      resized.has_alpha ? CompositeOnChessboard(resized) : resized.pixels;
  out.patches = Patchify(rgb, size.width, size.height, out.grid_height, out.grid_width, config);
  return out;
}

}  // namespace strata::media
