#include "tools/mxfp4_quantize.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "tools/weight_init.h"

namespace strata::tools {
namespace {

std::vector<float> Decode(const Mxfp4Weights& q, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    DecodeMxfp4(q.packed.data() + r * cols / 2, q.scales.data() + r * cols / 32,
                static_cast<size_t>(cols), out.data() + r * cols);
  }
  return out;
}

TEST(Mxfp4QuantizeTest, RepresentableValuesRoundTripExactly) {
  // Row 0: the 16 E2M1 values twice (scale 1); row 1: the same × 2^-3 (scale 2^-3).
  std::vector<float> values;
  for (int row = 0; row < 2; ++row) {
    for (int i = 0; i < 32; ++i) values.push_back(std::ldexp(kE2M1Values[i % 16], -3 * row));
  }
  const Mxfp4Weights q = QuantizeMxfp4(values, 2, 32);
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{127, 124}));
  const std::vector<float> back = Decode(q, 2, 32);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(back[i], values[i]) << i;
}

TEST(Mxfp4QuantizeTest, LowNibbleHoldsTheEvenIndex) {
  std::vector<float> values(32, 0.0f);
  values[0] = 0.5f;   // code 1
  values[1] = -6.0f;  // code 15 (sets the scale to 2^0)
  const Mxfp4Weights q = QuantizeMxfp4(values, 1, 32);
  EXPECT_EQ(q.packed[0], 0xF1);
  EXPECT_EQ(q.scales[0], 127);
}

TEST(Mxfp4QuantizeTest, ScaleIsTheSmallestPowerOfTwoCoveringTheGroupMaximum) {
  auto scale_for = [](float amax) {
    std::vector<float> values(32, 0.0f);
    values[7] = amax;
    return QuantizeMxfp4(values, 1, 32).scales[0];
  };
  EXPECT_EQ(scale_for(6.0f), 127);
  EXPECT_EQ(scale_for(6.01f), 128);
  EXPECT_EQ(scale_for(3.0f), 126);
  EXPECT_EQ(scale_for(2.9f), 126);
  EXPECT_EQ(scale_for(0.75f), 124);
}

TEST(Mxfp4QuantizeTest, NearestCodeBreaksTiesTowardTheEvenCode) {
  EXPECT_EQ(NearestE2M1Code(0.25f), 0);  // 0 | 0.5
  EXPECT_EQ(NearestE2M1Code(0.75f), 2);  // 0.5 | 1
  EXPECT_EQ(NearestE2M1Code(1.25f), 2);  // 1 | 1.5
  EXPECT_EQ(NearestE2M1Code(2.5f), 4);   // 2 | 3
  EXPECT_EQ(NearestE2M1Code(5.0f), 6);   // 4 | 6
  EXPECT_EQ(NearestE2M1Code(-0.75f), 10);
  EXPECT_EQ(NearestE2M1Code(0.8f), 2);
  EXPECT_EQ(NearestE2M1Code(-0.1f), 0);  // -0 is stored as +0
  EXPECT_EQ(NearestE2M1Code(9.0f), 7);   // saturates
}

TEST(Mxfp4QuantizeTest, RandomWeightsDecodeWithinHalfAStep) {
  constexpr int64_t kRows = 16, kCols = 96;
  const std::vector<float> values =
      SampleValues(InitSpec::Normal(0.0, 0.05), kRows * kCols, /*seed=*/3);
  const Mxfp4Weights q = QuantizeMxfp4(values, kRows, kCols);
  const std::vector<float> back = Decode(q, kRows, kCols);
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    const float scale = std::ldexp(1.0f, q.scales[i / 32] - 127);
    const float magnitude = std::fabs(values[i]) / scale;
    ASSERT_LE(magnitude, 6.0f) << i;
    // Half the spacing of the E2M1 grid around |w|/scale: 0.25 below 2, 0.5 below 4, else 1.
    const float half_step = magnitude < 2.0f ? 0.25f : (magnitude < 4.0f ? 0.5f : 1.0f);
    EXPECT_LE(std::fabs(back[i] - values[i]), half_step * scale * 1.0001f) << i;
  }
}

}  // namespace
}  // namespace strata::tools
