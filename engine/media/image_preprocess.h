// Kimi K3's image preprocessing (docs/vision.md): resize only when over the patch budget,
// composite transparency over a chessboard, zero-pad to whole merge windows, normalise, and cut
// into patches. The result is what the vision tower's patch embedding reads.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/media/image_decode.h"
#include "engine/vision/vision_config.h"

namespace strata::media {

struct ImagePatches {
  int original_width = 0;  // as decoded: what the prompt's media block names
  int original_height = 0;
  int width = 0;  // after the resize (before padding)
  int height = 0;
  int grid_height = 0;  // patches along each side of the padded image
  int grid_width = 0;
  // [grid_height × grid_width, 3 × patch × patch] f32, patches row-major over the grid, each
  // flattened channel-first (c, dy, dx) with x = (pixel / 255 − mean[c]) / std[c].
  std::vector<float> patches;

  int64_t num_patches() const { return int64_t{grid_height} * grid_width; }
};

// The size an image of width × height is resized to (itself when within the budget):
// s = min(1, sqrt(in_patch_limit / (max(1, W/p) · max(1, H/p))), max_side / W, max_side / H),
// new side = min(max(1, int(side · s)), max_side), with W/p and H/p integer divisions, int()
// truncating and the arithmetic in doubles in the release's order. The budget bounds the
// patches before padding: the padded grid may hold a little more than in_patch_limit (up to
// ~2.6% at the released values, e.g. 3611² → 258 × 258), as in the release.
struct ImageSize {
  int width = 0;
  int height = 0;
};
ImageSize ResizedSize(int width, int height, const engine::VisionConfig& config);

// Rows the image becomes in the language model: (grid_height / merge_h) · (grid_width / merge_w).
int64_t NumMergedRows(const ImagePatches& image, const engine::VisionConfig& config);

// InvalidArgument only for a config with a zero size or std; the image is any DecodedImage
// (pixels.size() must match its size: CHECKed). Work is bounded by construction: each side is
// at most max_side_pixels after the resize.
absl::StatusOr<ImagePatches> PreprocessImage(const DecodedImage& image,
                                             const engine::VisionConfig& config);

}  // namespace strata::media
