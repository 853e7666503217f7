#include "core/int8_quantize.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace strata {
namespace {

struct Quantized {
  std::vector<int8_t> codes;
  std::vector<uint16_t> scales;
};

Quantized Quantize(const std::vector<float>& row) {
  const int64_t cols = static_cast<int64_t>(row.size());
  Quantized q{std::vector<int8_t>(row.size()), std::vector<uint16_t>(row.size() / 32)};
  EXPECT_TRUE(QuantizeInt8Row(DType::kF32, row.data(), cols, q.codes.data(), q.scales.data()));
  return q;
}

// Groups of 32 at magnitudes from subnormal to huge, Gaussian and heavy-tailed.
std::vector<float> Groups(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::student_t_distribution<float> heavy(3.0f);
  std::vector<float> row;
  for (float magnitude : {1e-40f, 1e-30f, 1e-6f, 0.02f, 1.0f, 300.0f, 1e30f}) {
    for (int tail = 0; tail < 2; ++tail) {
      for (int i = 0; i < 32; ++i) row.push_back(magnitude * (tail ? heavy(rng) : normal(rng)));
    }
  }
  return row;
}

TEST(Int8QuantizeTest, ScaleIsTheSmallestBf16CoveringTheGroup) {
  const std::vector<float> row = Groups(1);
  const Quantized q = Quantize(row);
  for (size_t g = 0; g < q.scales.size(); ++g) {
    double amax = 0.0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(double{row[g * 32 + i]}));
    const double s = Bf16ToF32(q.scales[g]);
    // Covering up to amax/127's own rounding to f32 (half an ulp).
    EXPECT_GE(127.0 * s, amax * (1.0 - 0x1p-24)) << "group " << g;
    const double below = Bf16ToF32(static_cast<uint16_t>(q.scales[g] - 1));
    EXPECT_LT(127.0 * below, amax * (1.0 + 0x1p-23)) << "group " << g;
  }
}

TEST(Int8QuantizeTest, EveryCodeIsTheNearestInteger) {
  const std::vector<float> row = Groups(2);
  const Quantized q = Quantize(row);
  for (size_t i = 0; i < row.size(); ++i) {
    const double s = Bf16ToF32(q.scales[i / 32]);
    const double exact = row[i] / s;  // the quotient before any f32 rounding
    EXPECT_LE(std::fabs(exact - q.codes[i]), 0.5 + 1e-5) << i << ": " << row[i] << " / " << s;
    EXPECT_LE(std::abs(int{q.codes[i]}), 127) << i;
  }
}

TEST(Int8QuantizeTest, DecodeIsCodeTimesScaleExactly) {
  const std::vector<float> row = Groups(3);
  const Quantized q = Quantize(row);
  std::vector<float> back(row.size());
  DecodeInt8(q.codes.data(), q.scales.data(), row.size(), back.data());
  for (size_t i = 0; i < row.size(); ++i) {
    const double product = static_cast<double>(q.codes[i]) * Bf16ToF32(q.scales[i / 32]);
    EXPECT_EQ(double{back[i]}, product) << i;
    // Within half a step of the value (and the step is at most amax/127 of the group).
    EXPECT_LE(std::fabs(double{back[i]} - row[i]), 0.5 * Bf16ToF32(q.scales[i / 32]) * 1.0001) << i;
  }
}

TEST(Int8QuantizeTest, Bf16RowsUnalignedEqualTheirF32Values) {
  std::vector<float> values = Groups(4);
  std::vector<uint8_t> storage(values.size() * 2 + 1);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = F32ToBf16(values[i]);
    values[i] = Bf16ToF32(bits);
    std::memcpy(storage.data() + 1 + 2 * i, &bits, 2);  // odd address
  }
  const Quantized from_f32 = Quantize(values);
  std::vector<int8_t> codes(values.size());
  std::vector<uint16_t> scales(values.size() / 32);
  ASSERT_TRUE(QuantizeInt8Row(DType::kBF16, storage.data() + 1, static_cast<int64_t>(values.size()),
                              codes.data(), scales.data()));
  EXPECT_EQ(codes, from_f32.codes);
  EXPECT_EQ(scales, from_f32.scales);
}

TEST(Int8QuantizeTest, ZeroGroupsAndExactMultiplesRoundTrip) {
  std::vector<float> row(64, 0.0f);
  for (int i = 0; i < 32; ++i) row[32 + i] = static_cast<float>(i - 16) * 0.25f;  // amax 4
  const Quantized q = Quantize(row);
  EXPECT_EQ(q.scales[0], 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q.codes[i], 0);
  std::vector<float> back(64);
  DecodeInt8(q.codes.data(), q.scales.data(), 64, back.data());
  // 4/127 rounds up to a bf16 scale; quarter steps are not multiples of it, but the error of each
  // value stays within half a step and the largest magnitude maps to ±127 or just under.
  EXPECT_GE(std::abs(int{q.codes[32]}), 126);
  for (int i = 32; i < 64; ++i) {
    EXPECT_LE(std::fabs(back[i] - row[i]), 0.5f * Bf16ToF32(q.scales[1])) << i;
  }
}

TEST(Int8QuantizeTest, NonFiniteValuesAreRefused) {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> row(64, 1.0f);
    row[40] = bad;
    std::vector<int8_t> codes(64);
    std::vector<uint16_t> scales(2);
    EXPECT_FALSE(QuantizeInt8Row(DType::kF32, row.data(), 64, codes.data(), scales.data())) << bad;
  }
}

}  // namespace
}  // namespace strata
