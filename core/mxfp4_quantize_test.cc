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

TEST(Mxfp4QuantizeTest, CoveringScaleOfALoneValueIsTheSmallestPowerOfTwoThatHoldsIt) {
  auto scale_for = [](float amax) {
    std::vector<float> values(32, 0.0f);
    values[7] = amax;
    return QuantizeMxfp4(values, 1, 32).scales[0];
  };
  EXPECT_EQ(scale_for(6.0f), 127);
  EXPECT_EQ(scale_for(3.0f), 126);
  EXPECT_EQ(scale_for(2.9f), 126);  // 5.8 at 2^-1; at 2^-2 it would saturate at 6·2^-2
  EXPECT_EQ(scale_for(0.75f), 124);
  EXPECT_EQ(Mxfp4ScaleByte(6.01f), 128);
}

TEST(Mxfp4QuantizeTest, HalfTheCoveringScaleWinsWhereItErrsLess) {
  // 7 and thirty-one 1.3s. At scale 2: 7 → 8 (3.5 → 4), 1.3 → 1 (0.65 → 0.5): squared error
  // 0.25 + 31·0.0225 = 0.95 in units of 2, 3.79 in units of 1. At scale 1: 7 → 6, 1.3 → 1.5:
  // 1 + 31·0.04 = 2.24. Scale 1 wins although 7 saturates.
  std::vector<float> values(32, 1.3f);
  values[0] = 7.0f;
  const Mxfp4Weights q = QuantizeMxfp4(values, 1, 32);
  EXPECT_EQ(Mxfp4ScaleByte(7.0f), 128);
  EXPECT_EQ(q.scales[0], 127);
  std::vector<float> back(32);
  DecodeMxfp4(q.packed.data(), q.scales.data(), 32, back.data());
  EXPECT_EQ(back[0], 6.0f);
  EXPECT_EQ(back[1], 1.5f);
}

// Squared error of `group` decoded at scale byte `scale` with the reference's nearest codes.
double GroupErrorAt(const float* group, int scale) {
  double error = 0;
  for (int i = 0; i < 32; ++i) {
    const float s = std::ldexp(1.0f, scale - 127);
    const double miss = kE2M1Values[NearestCodeByDistance(group[i] / s)] * double{s} - group[i];
    error += miss * miss;
  }
  return error;
}

TEST(Mxfp4QuantizeTest, EachGroupTakesTheBetterOfTheCoveringScaleAndTheOneBelow) {
  // Gaussian and heavy-tailed (Student-t, 3 degrees) groups at several magnitudes.
  constexpr int64_t kRows = 64, kCols = 256;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::student_t_distribution<float> heavy(3.0f);
  std::vector<float> values(kRows * kCols);
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    const float magnitude = std::ldexp(1.0f, static_cast<int>(i / kCols % 7) * 3 - 12);
    values[i] = magnitude * (i / kCols % 2 == 0 ? normal(rng) : heavy(rng));
  }
  const Mxfp4Weights q = QuantizeMxfp4(values, kRows, kCols);
  const std::vector<float> back = Decode(q, kRows, kCols);
  int finer = 0;
  for (int64_t g = 0; g < kRows * kCols / 32; ++g) {
    const float* group = values.data() + g * 32;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(group[i]));
    const int cover = Mxfp4ScaleByte(amax), chosen = q.scales[static_cast<size_t>(g)];
    ASSERT_TRUE(chosen == cover || chosen == cover - 1) << g;
    finer += chosen != cover;
    const double at_cover = GroupErrorAt(group, cover), at_finer = GroupErrorAt(group, cover - 1);
    EXPECT_LE(GroupErrorAt(group, chosen), std::min(at_cover, at_finer) * (1 + 1e-5)) << g;
    for (int i = 0; i < 32; ++i) {  // every value is its nearest code at the chosen scale
      const float s = std::ldexp(1.0f, chosen - 127);
      ASSERT_EQ(back[static_cast<size_t>(g * 32 + i)],
                kE2M1Values[NearestCodeByDistance(group[i] / s)] * s)
          << g << " " << i;
    }
  }
  EXPECT_GT(finer, kRows * kCols / 32 / 10);  // both choices occur
  EXPECT_LT(finer, kRows * kCols / 32 * 9 / 10);
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
  row[3] = 1e38f;   // scale 2^124: 4.7 → 4
  row[4] = -1e37f;  // 0.47 → 0.5
  row[5] = 1e-45f;  // a subnormal: 0 at that scale
  const Mxfp4Weights q = QuantizeMxfp4(row, 1, 32);
  EXPECT_EQ(q.scales[0], 127 + 124);
  std::vector<float> back(32);
  DecodeMxfp4(q.packed.data(), q.scales.data(), 32, back.data());
  EXPECT_EQ(back[3], 4.0f * std::ldexp(1.0f, 124));
  EXPECT_EQ(back[4], -0.5f * std::ldexp(1.0f, 124));
  EXPECT_EQ(back[5], 0.0f);
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
