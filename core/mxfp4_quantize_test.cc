#include "core/mxfp4_quantize.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include <random>
#include "core/dtype.h"

namespace strata {
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
  std::vector<float> values(kRows * kCols);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (float& v : values) v = normal(rng);
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

// The definition the branch-free code must equal: the nearest of the eight magnitudes, ties to
// the even code, the sign bit only on a non-zero code.
uint8_t NearestCodeByDistance(float scaled) {
  const double magnitude = std::fabs(double{scaled});  // exact differences
  int best = 0;
  for (int code = 1; code < 8; ++code) {
    const double best_error = std::fabs(magnitude - kE2M1Values[best]);
    const double error = std::fabs(magnitude - kE2M1Values[code]);
    if (error < best_error || (error == best_error && code % 2 == 0)) best = code;
  }
  if (magnitude > 64.0) best = 7;  // saturates (differences past 2^53 are not exact in double)
  if (best != 0 && std::signbit(scaled)) best |= 8;
  return static_cast<uint8_t>(best);
}

TEST(Mxfp4QuantizeTest, NearestCodeEqualsTheNearestByDistanceEverywhere) {
  std::vector<float> probes;
  // Every finite bf16 value (all exponents, both signs: subnormals, huge) ...
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint32_t f = bits << 16;
    float v;
    std::memcpy(&v, &f, sizeof(v));
    if (std::isfinite(v)) probes.push_back(v);
  }
  // ... and around every midpoint and grid value, a few ulps either side.
  for (float anchor : {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f,
                       4.0f, 5.0f, 6.0f}) {
    for (float sign : {1.0f, -1.0f}) {
      float v = sign * anchor;
      for (int i = 0; i < 4; ++i) v = std::nextafter(v, -INFINITY);
      for (int i = 0; i < 9; ++i, v = std::nextafter(v, INFINITY)) probes.push_back(v);
    }
  }
  for (float v : probes) ASSERT_EQ(NearestE2M1Code(v), NearestCodeByDistance(v)) << v;
  EXPECT_EQ(NearestE2M1Code(NAN), 0);
  EXPECT_EQ(NearestE2M1Code(-INFINITY), 15);
}

TEST(Mxfp4QuantizeTest, Bf16RowsQuantizeAsTheirF32Values) {
  // An odd offset: checkpoint tensors need not be aligned to their element size.
  constexpr int64_t kCols = 96;
  std::vector<float> f32(kCols);
  std::vector<uint8_t> bf16_bytes(1 + kCols * 2);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (int64_t i = 0; i < kCols; ++i) {
    uint32_t bits;
    const float v = normal(rng) * (i < 32 ? 1e-30f : 1.0f);  // a group near the E8M0 floor
    std::memcpy(&bits, &v, sizeof(bits));
    const uint16_t high = static_cast<uint16_t>(bits >> 16);  // truncation is a bf16 value
    std::memcpy(&bf16_bytes[1 + i * 2], &high, 2);
    const uint32_t back = uint32_t{high} << 16;
    std::memcpy(&f32[i], &back, sizeof(float));
  }
  const Mxfp4Weights expected = QuantizeMxfp4(f32, 1, kCols);
  std::vector<uint8_t> packed(kCols / 2), scales(kCols / 32);
  ASSERT_TRUE(
      QuantizeMxfp4Row(DType::kBF16, bf16_bytes.data() + 1, kCols, packed.data(), scales.data()));
  EXPECT_EQ(packed, expected.packed);
  EXPECT_EQ(scales, expected.scales);
  EXPECT_LT(scales[0], 127 - 90);  // the tiny group got its own small scale
}

TEST(Mxfp4QuantizeTest, ExtremeGroupsKeepTheirScaleInRange) {
  EXPECT_EQ(Mxfp4ScaleByte(0.0f), 127);
  EXPECT_EQ(Mxfp4ScaleByte(std::numeric_limits<float>::max()), 127 + 126);
  EXPECT_EQ(Mxfp4ScaleByte(std::numeric_limits<float>::denorm_min()), 0);  // clamped at 2^-127
  std::vector<float> row(32, 0.0f);
  row[3] = std::numeric_limits<float>::max();
  row[4] = -1e37f;
  const Mxfp4Weights q = QuantizeMxfp4(row, 1, 32);
  std::vector<float> back(32);
  DecodeMxfp4(q.packed.data(), q.scales.data(), 32, back.data());
  EXPECT_EQ(back[3], 6.0f * std::ldexp(1.0f, 126));  // the largest value E8M0 × E2M1 can hold
  EXPECT_EQ(back[4], 0.0f);                          // 1e37 is under a quarter of a step
}

TEST(Mxfp4QuantizeTest, NonFiniteValuesAreRefused) {
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    std::vector<float> row(64, 0.5f);
    row[40] = bad;
    std::vector<uint8_t> packed(32), scales(2);
    EXPECT_FALSE(QuantizeMxfp4Row(DType::kF32, row.data(), 64, packed.data(), scales.data()))
        << bad;
  }
}

}  // namespace
}  // namespace strata
