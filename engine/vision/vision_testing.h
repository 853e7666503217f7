// Test helpers of the vision tower's tests (CPU and CUDA): images as preprocessing gives them.
#pragma once

#include <cstdint>
#include <random>

#include "engine/media/image_preprocess.h"

namespace strata::engine::vision_testing {

// A grid of patches as preprocessing gives them: pixels in [−1, 1] after normalisation.
inline media::ImagePatches RandomPatches(int grid_h, int grid_w, int patch, uint32_t seed) {
  media::ImagePatches image;
  image.grid_height = grid_h;
  image.grid_width = grid_w;
  image.width = image.original_width = grid_w * patch;
  image.height = image.original_height = grid_h * patch;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pixel(-1.0f, 1.0f);
  image.patches.resize(static_cast<size_t>(image.num_patches() * 3 * patch * patch));
  for (float& v : image.patches) v = pixel(rng);
  return image;
}

}  // namespace strata::engine::vision_testing
