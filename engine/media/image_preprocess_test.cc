#include "engine/media/image_preprocess.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace strata::media {
namespace {

using engine::VisionConfig;
using ::testing::HasSubstr;

float Normalised(int pixel) { return static_cast<float>((pixel / 255.0 - 0.5) / 0.5); }

DecodedImage SolidImage(int width, int height, std::vector<uint8_t> pixel) {
  DecodedImage image;
  image.width = width;
  image.height = height;
  image.has_alpha = pixel.size() == 4;
  for (int i = 0; i < width * height; ++i) {
    image.pixels.insert(image.pixels.end(), pixel.begin(), pixel.end());
  }
  return image;
}

// Patch (gy, gx)'s element (c, dy, dx).
float At(const ImagePatches& patches, int gy, int gx, int c, int dy, int dx, int p = 14) {
  const size_t patch = static_cast<size_t>(gy) * patches.grid_width + gx;
  return patches.patches[patch * 3 * p * p + (static_cast<size_t>(c) * p + dy) * p + dx];
}

TEST(ImagePreprocessTest, ResizedSizeOnTheReleasedBudget) {
  const VisionConfig config;
  const auto size = [&](int w, int h) {
    const ImageSize s = ResizedSize(w, h, config);
    return std::pair{s.width, s.height};
  };
  EXPECT_EQ(size(448, 448), (std::pair{448, 448}));
  EXPECT_EQ(size(1024, 768), (std::pair{1024, 768}));
  EXPECT_EQ(size(3584, 3584), (std::pair{3584, 3584}));
  EXPECT_EQ(size(4000, 3000), (std::pair{4000, 3000}));  // 285 · 214 = 60,990 patches: fits
  EXPECT_EQ(size(3611, 3611), (std::pair{3596, 3596}));  // s = 256 / 257, truncated
  EXPECT_EQ(size(10000, 100), (std::pair{7168, 71}));    // the 7168-pixel side limit binds
  EXPECT_EQ(size(100, 10000), (std::pair{71, 7168}));
  EXPECT_EQ(size(20000, 3), (std::pair{7168, 1}));  // int(1.07) = 1
  EXPECT_EQ(size(1, 1), (std::pair{1, 1}));
}

TEST(ImagePreprocessTest, MergedRowsOfTheReleasedExamples) {
  const VisionConfig config;
  const auto rows = [&](int w, int h) {
    absl::StatusOr<ImagePatches> patches = PreprocessImage(SolidImage(w, h, {9, 9, 9}), config);
    EXPECT_TRUE(patches.ok()) << patches.status();
    return NumMergedRows(*patches, config);
  };
  EXPECT_EQ(rows(448, 448), 256);
  EXPECT_EQ(rows(1024, 768), 1036);
  EXPECT_EQ(rows(10000, 100), 768);  // 7168 × 71 → 512 × 6 patches
  EXPECT_EQ(rows(1, 1), 1);
}

TEST(ImagePreprocessTest, LargestUnresizedSquareGives16384Rows) {
  const VisionConfig config;
  absl::StatusOr<ImagePatches> patches = PreprocessImage(SolidImage(3584, 3584, {0, 0, 0}), config);
  ASSERT_TRUE(patches.ok()) << patches.status();
  EXPECT_EQ(patches->grid_height, 256);
  EXPECT_EQ(patches->grid_width, 256);
  EXPECT_EQ(NumMergedRows(*patches, config), 16384);
  EXPECT_EQ(patches->patches.size(), size_t{65536} * 588);
}

TEST(ImagePreprocessTest, ResizesOnlyOverTheBudget) {
  VisionConfig config;
  config.in_patch_limit = 16;
  absl::StatusOr<ImagePatches> small = PreprocessImage(SolidImage(50, 40, {1, 2, 3}), config);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->width, 50);  // 3 · 2 = 6 patches
  absl::StatusOr<ImagePatches> big = PreprocessImage(SolidImage(100, 100, {1, 2, 3}), config);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->original_width, 100);
  EXPECT_EQ(big->width, 57);  // sqrt(16 / 49) · 100, truncated
  EXPECT_EQ(big->height, 57);
  EXPECT_EQ(big->grid_width, 6);
  EXPECT_FLOAT_EQ(At(*big, 0, 0, 2, 0, 0), Normalised(3));  // a constant stays constant
}

TEST(ImagePreprocessTest, PadsRightAndBottomWithZeroBeforeNormalising) {
  const VisionConfig config;
  absl::StatusOr<ImagePatches> patches = PreprocessImage(SolidImage(20, 15, {255, 128, 0}), config);
  ASSERT_TRUE(patches.ok());
  EXPECT_EQ(patches->width, 20);
  EXPECT_EQ(patches->grid_height, 2);  // 15 → 28
  EXPECT_EQ(patches->grid_width, 2);   // 20 → 28
  EXPECT_EQ(patches->patches.size(), size_t{4} * 588);
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 0, 0, 0), 1.0f);
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 1, 0, 0), Normalised(128));
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 2, 0, 0), -1.0f);
  EXPECT_FLOAT_EQ(At(*patches, 0, 1, 0, 0, 5), 1.0f);   // x = 19: inside
  EXPECT_FLOAT_EQ(At(*patches, 0, 1, 0, 0, 6), -1.0f);  // x = 20: padding
  EXPECT_FLOAT_EQ(At(*patches, 1, 0, 0, 0, 0), 1.0f);   // y = 14: inside
  EXPECT_FLOAT_EQ(At(*patches, 1, 0, 0, 1, 0), -1.0f);  // y = 15: padding
  EXPECT_FLOAT_EQ(At(*patches, 1, 1, 1, 13, 13), -1.0f);
}

TEST(ImagePreprocessTest, NormalisesWithTheConfiguredMeanAndStd) {
  VisionConfig config;
  config.image_mean = {0.48145466f, 0.4578275f, 0.40821073f};
  config.image_std = {0.26862954f, 0.26130258f, 0.27577711f};
  absl::StatusOr<ImagePatches> patches = PreprocessImage(SolidImage(1, 1, {10, 100, 200}), config);
  ASSERT_TRUE(patches.ok());
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 0, 0, 0), (10 / 255.0 - 0.48145466) / 0.26862954);
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 1, 0, 0), (100 / 255.0 - 0.4578275) / 0.26130258);
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 2, 0, 0), (200 / 255.0 - 0.40821073) / 0.27577711);
  EXPECT_FLOAT_EQ(At(*patches, 0, 1, 0, 0, 0), -0.48145466 / 0.26862954);  // padding
}

TEST(ImagePreprocessTest, PatchesAreRowMajorOverTheGridAndChannelFirstInside) {
  // Pixel (x, y) = (x, y, x + y) on a 56 × 42 image: 4 × 3 patches (padded to 4 × 4).
  DecodedImage image;
  image.width = 56;
  image.height = 42;
  for (int y = 0; y < 42; ++y) {
    for (int x = 0; x < 56; ++x) {
      image.pixels.insert(image.pixels.end(), {static_cast<uint8_t>(x), static_cast<uint8_t>(y),
                                               static_cast<uint8_t>(x + y)});
    }
  }
  absl::StatusOr<ImagePatches> patches = PreprocessImage(image, VisionConfig{});
  ASSERT_TRUE(patches.ok());
  ASSERT_EQ(patches->grid_height, 4);
  ASSERT_EQ(patches->grid_width, 4);
  for (int gy = 0; gy < 3; ++gy) {
    for (int gx = 0; gx < 4; ++gx) {
      for (const auto& [dy, dx] : {std::pair{0, 0}, {3, 11}, {13, 13}}) {
        const int x = gx * 14 + dx;
        const int y = gy * 14 + dy;
        EXPECT_FLOAT_EQ(At(*patches, gy, gx, 0, dy, dx), Normalised(x));
        EXPECT_FLOAT_EQ(At(*patches, gy, gx, 1, dy, dx), Normalised(y));
        EXPECT_FLOAT_EQ(At(*patches, gy, gx, 2, dy, dx), Normalised(x + y));
      }
    }
  }
  EXPECT_FLOAT_EQ(At(*patches, 3, 2, 0, 0, 0), -1.0f);  // row 42: padding
}

TEST(ImagePreprocessTest, TransparencyIsCompositedOverAChessboardWhiteAtTheOrigin) {
  absl::StatusOr<ImagePatches> patches =
      PreprocessImage(SolidImage(20, 20, {0, 0, 0, 0}), VisionConfig{});
  ASSERT_TRUE(patches.ok());
  const float white = 1.0f;
  const float gray = Normalised(180);
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 0, 0, 0), white);  // square (0, 0)
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 1, 7, 7), white);
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 2, 0, 8), gray);   // square (1, 0)
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 0, 8, 0), gray);   // square (0, 1)
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 0, 8, 8), white);  // square (1, 1)
  EXPECT_FLOAT_EQ(At(*patches, 1, 1, 0, 2, 2), white);  // (16, 16): square (2, 2)
  EXPECT_FLOAT_EQ(At(*patches, 1, 1, 0, 6, 6), -1.0f);  // (20, 20): padding stays 0
}

TEST(ImagePreprocessTest, PartialAlphaBlendsWithRounding) {
  // round((c · a + board · (255 − a)) / 255) with a = 100: white square, then gray.
  absl::StatusOr<ImagePatches> patches =
      PreprocessImage(SolidImage(16, 1, {0, 200, 255, 100}), VisionConfig{});
  ASSERT_TRUE(patches.ok());
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 0, 0, 0), Normalised(155));  // 155 · 255 / 255
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 1, 0, 0), Normalised(233));  // 59,525 / 255 = 233.4
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 0, 0, 8), Normalised(109));  // 27,900 / 255 = 109.4
  EXPECT_FLOAT_EQ(At(*patches, 0, 0, 2, 0, 8), Normalised(209));  // 53,400 / 255 = 209.4
}

TEST(ImagePreprocessTest, BadConfigIsRefusedByName) {
  VisionConfig config;
  config.patch_size = 0;
  EXPECT_THAT(PreprocessImage(SolidImage(2, 2, {0, 0, 0}), config).status().message(),
              HasSubstr("patch_size (0)"));
  config = VisionConfig{};
  config.image_std = {0.5f, 0.0f, 0.5f};
  EXPECT_THAT(PreprocessImage(SolidImage(2, 2, {0, 0, 0}), config).status().message(),
              HasSubstr("image_std"));
}

}  // namespace
}  // namespace strata::media
