// The resampler against outputs of Pillow 9.4's Image.resize(..., Image.BICUBIC) (recorded below),
// and its invariants. tests/media/pil_compare_test.py compares whole images against Pillow.
#include "engine/media/bicubic_resize.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace strata::media {
namespace {

const std::vector<uint8_t> kRow = {0, 255, 10, 200, 30, 180, 60, 120, 90, 255, 0};

TEST(BicubicResizeTest, MatchesPillowOnOneRow) {
  // Pillow: Image.fromarray(kRow as 1×11 "L").resize((n, 1), Image.BICUBIC).
  EXPECT_EQ(ResizeBicubic(kRow, 11, 1, 1, 4, 1), (std::vector<uint8_t>{113, 112, 108, 127}));
  EXPECT_EQ(ResizeBicubic(kRow, 11, 1, 1, 7, 1),
            (std::vector<uint8_t>{103, 116, 113, 119, 88, 151, 103}));
  EXPECT_EQ(
      ResizeBicubic(kRow, 11, 1, 1, 15, 1),
      (std::vector<uint8_t>{0, 169, 194, 11, 178, 109, 54, 180, 86, 81, 117, 87, 224, 163, 0}));
}

TEST(BicubicResizeTest, VerticalPassEqualsHorizontalOnTheTransposedImage) {
  EXPECT_EQ(ResizeBicubic(kRow, 1, 11, 1, 1, 4), (std::vector<uint8_t>{113, 112, 108, 127}));
}

TEST(BicubicResizeTest, SameSizeIsTheIdentity) {
  std::vector<uint8_t> pixels(5 * 3 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 29);
  EXPECT_EQ(ResizeBicubic(pixels, 5, 3, 3, 5, 3), pixels);
  EXPECT_EQ(ResizeBicubic(kRow, 11, 1, 1, 11, 1), kRow);
}

TEST(BicubicResizeTest, ConstantImagesStayConstant) {
  const std::vector<uint8_t> gray(37 * 23 * 3, 200);
  for (const auto& [w, h] : {std::pair{5, 3}, {36, 1}, {1, 22}, {80, 50}}) {
    EXPECT_EQ(ResizeBicubic(gray, 37, 23, 3, w, h), std::vector<uint8_t>(w * h * 3, 200)) << w;
  }
}

TEST(BicubicResizeTest, StraightAlphaGoesThroughPremultipliedAsPillow) {
  // 6×4 RGBA: left half opaque red, right half transparent green, one half-transparent blue
  // pixel; Pillow's resize((3, 2), Image.BICUBIC) of it.
  std::vector<uint8_t> rgba;
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 6; ++x) {
      if (y == 1 && x == 1) {
        rgba.insert(rgba.end(), {0, 0, 255, 128});
      } else if (x < 3) {
        rgba.insert(rgba.end(), {255, 0, 0, 255});
      } else {
        rgba.insert(rgba.end(), {0, 255, 0, 0});
      }
    }
  }
  const std::vector<uint8_t> expected = {224, 0, 29, 234, 242, 0, 12, 121, 0, 0, 0, 0,
                                         247, 0, 7,  249, 252, 0, 4,  126, 0, 0, 0, 0};
  EXPECT_EQ(ResizeBicubicStraightAlpha(rgba, 6, 4, 3, 2), expected);
  // Without premultiplication the invisible green would bleed into the middle column.
  EXPECT_GT(ResizeBicubic(rgba, 6, 4, 4, 3, 2)[4 + 1], 0);
}

}  // namespace
}  // namespace strata::media
