#include "kernels/reference/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/reference/internal/test_util.h"
#include "kernels/reference/matmul_q8.h"

namespace strata::kernels {
namespace {

using testing::AllClose;
using testing::Rng;

// y = x · Wᵀ by the textbook triple loop in f64 (the test's own oracle).
std::vector<float> NaiveMatmul(const std::vector<float>& x, int64_t m, int64_t k,
                               const std::vector<float>& w, int64_t n) {
  std::vector<float> y(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(x[i * k + p]) * w[j * k + p];
      y[i * n + j] = static_cast<float>(acc);
    }
  }
  return y;
}

TEST(MatmulReferenceTest, HandComputedTwoByThree) {
  const std::vector<float> x = {1, 2, 3,  //
                                4, 5, 6};
  const std::vector<float> w = {1.0f, 0.0f, -1.0f,  // W is [n=2, k=3]
                                0.5f, 2.0f, 1.0f};
  std::vector<float> y(4);
  MatmulReference(x.data(), 2, 3, w.data(), 2, y.data());
  EXPECT_EQ(y, (std::vector<float>{-2.0f, 7.5f, -2.0f, 18.0f}));
}

TEST(MatmulReferenceTest, MatchesNaiveF64OnOddShapes) {
  Rng rng(7);
  // (m, k, n): 1, primes, non-multiples of 8/16, and n crossing the internal weight tiles.
  const int64_t shapes[][3] = {{1, 1, 1},     {1, 7, 3},    {3, 17, 5},    {5, 33, 19},
                               {13, 64, 130}, {2, 1031, 7}, {37, 71, 263}, {4, 9, 300}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], k = s[1], n = s[2];
    const std::vector<float> x = rng.Normal(m * k);
    const std::vector<float> w = rng.Normal(n * k);
    std::vector<float> y(m * n);
    MatmulReference(x.data(), m, k, w.data(), n, y.data());
    EXPECT_TRUE(AllClose(y, NaiveMatmul(x, m, k, w, n), 1e-6, 1e-6))
        << "m=" << m << " k=" << k << " n=" << n;
  }
}

TEST(MatmulReferenceTest, RowOfBatchEqualsSingleRowProductExactly) {
  Rng rng(8);
  const int64_t m = 9, k = 45, n = 70;
  const std::vector<float> x = rng.Normal(m * k);
  const std::vector<float> w = rng.Normal(n * k);
  std::vector<float> y(m * n);
  MatmulReference(x.data(), m, k, w.data(), n, y.data());
  for (int64_t i = 0; i < m; ++i) {
    std::vector<float> row(n);
    MatmulReference(x.data() + i * k, 1, k, w.data(), n, row.data());
    EXPECT_EQ(row, std::vector<float>(y.begin() + i * n, y.begin() + (i + 1) * n)) << "row " << i;
  }
}

TEST(MatmulReferenceTest, Bf16EqualsF32OfWidenedWeights) {
  Rng rng(9);
  const int64_t shapes[][3] = {{1, 5, 3}, {3, 24, 17}, {6, 129, 41}, {2, 300, 260}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], k = s[1], n = s[2];
    const std::vector<float> x = rng.Normal(m * k);
    const std::vector<float> w_src = rng.Normal(n * k);
    std::vector<uint16_t> w_bf16(n * k);
    std::vector<float> w_wide(n * k);
    for (int64_t i = 0; i < n * k; ++i) {
      w_bf16[i] = F32ToBf16(w_src[i]);
      w_wide[i] = std::bit_cast<float>(static_cast<uint32_t>(w_bf16[i]) << 16);
    }
    std::vector<float> y_bf16(m * n), y_f32(m * n);
    MatmulBf16Reference(x.data(), m, k, w_bf16.data(), n, y_bf16.data());
    MatmulReference(x.data(), m, k, w_wide.data(), n, y_f32.data());
    EXPECT_EQ(y_bf16, y_f32) << "m=" << m << " k=" << k << " n=" << n;
  }
}

TEST(MatmulReferenceTest, Mxfp4HandComputedLowNibbleFirst) {
  const int64_t k = 32, n = 2;
  std::vector<uint8_t> packed(n * k / 2, 0);
  // Row 0: element 0 = code 7 (6.0), element 1 = code 9 (−0.5), scale 2^(128−127) = 2.
  packed[0] = 0x97;
  // Row 1: element 30 = code 3 (1.5), element 31 = code 0xD (−3.0), scale 2^(126−127) = 0.5.
  packed[16 + 15] = 0xD3;
  const std::vector<uint8_t> scales = {128, 126};
  std::vector<float> x(k, 0.0f);
  x[0] = 1.0f;
  x[1] = 2.0f;
  x[30] = 4.0f;
  x[31] = 5.0f;
  std::vector<float> y(n);
  MatmulMxfp4Reference(x.data(), 1, k, packed.data(), scales.data(), n, y.data());
  EXPECT_EQ(y[0], 1.0f * 12.0f + 2.0f * -1.0f);
  EXPECT_EQ(y[1], 4.0f * 0.75f + 5.0f * -1.5f);
}

TEST(MatmulReferenceTest, Mxfp4EqualsF32OfExplicitlyDecodedTable) {
  // E2M1 code → value, written out from the format definition (docs/checkpoint.md §6).
  const float kTable[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  Rng rng(10);
  const int64_t m = 3, k = 96, n = 11;
  std::vector<uint8_t> packed(n * k / 2), scales(n * k / 32);
  std::mt19937 bytes(11);
  for (uint8_t& b : packed) b = static_cast<uint8_t>(bytes() & 0xFF);
  for (uint8_t& s : scales) s = static_cast<uint8_t>(120 + bytes() % 15);
  std::vector<float> w(n * k);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) {
      const uint8_t byte = packed[j * k / 2 + p / 2];
      const int code = p % 2 == 0 ? (byte & 0xF) : (byte >> 4);
      const int exponent = scales[j * k / 32 + p / 32] - 127;
      w[j * k + p] = kTable[code] * std::ldexp(1.0f, exponent);
    }
  }
  const std::vector<float> x = rng.Normal(m * k);
  std::vector<float> y_fp4(m * n), y_f32(m * n);
  MatmulMxfp4Reference(x.data(), m, k, packed.data(), scales.data(), n, y_fp4.data());
  MatmulReference(x.data(), m, k, w.data(), n, y_f32.data());
  EXPECT_EQ(y_fp4, y_f32);
  EXPECT_TRUE(AllClose(y_fp4, NaiveMatmul(x, m, k, w, n), 1e-6, 1e-6));
}

TEST(MatmulReferenceTest, EmptyProductsWriteNothing) {
  std::vector<float> y = {42.0f};
  const float x = 1.0f, w = 1.0f;
  MatmulReference(&x, 0, 1, &w, 1, y.data());
  MatmulReference(&x, 1, 1, &w, 0, y.data());
  EXPECT_EQ(y[0], 42.0f);
}

// Q8 activations (matmul_q8.h): codes within [−127, 127], the block's largest magnitude coded
// ±127, every value within half a step of code · scale; a block of zeros (or of values
// too small to scale) codes zeros with scale 0, a non-finite one has a NaN scale.
TEST(MatmulQ8ReferenceTest, QuantizeKeepsEachValueWithinHalfAStep) {
  std::mt19937 engine(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(5 * kQ8BlockSize);
  for (float& v : x) v = normal(engine);
  x[5] = -40.0f;  // block 0's largest, negative
  for (int e = 64; e < 96; ++e) x[e] = 0.0f;
  x[100] = std::nanf("");
  for (int e = 128; e < 160; ++e) x[e] = 1e-38f * normal(engine);  // 127 / amax overflows
  std::vector<int8_t> codes(x.size());
  std::vector<float> scales(5);
  QuantizeQ8Reference(x.data(), static_cast<int64_t>(x.size()), codes.data(), scales.data());
  EXPECT_EQ(codes[5], -127);
  EXPECT_FLOAT_EQ(scales[0], 40.0f / 127.0f);
  for (int b = 0; b < 2; ++b) {
    float amax = 0.0f;
    for (int e = 0; e < kQ8BlockSize; ++e) amax = std::max(amax, std::fabs(x[b * 32 + e]));
    EXPECT_EQ(scales[b], amax / 127.0f);
    for (int e = b * 32; e < (b + 1) * 32; ++e) {
      EXPECT_LE(std::abs(codes[e]), 127);
      EXPECT_LE(std::fabs(x[e] - codes[e] * scales[b]), 0.5f * scales[b] * 1.0001f) << e;
    }
  }
  EXPECT_EQ(scales[2], 0.0f);
  EXPECT_TRUE(std::isnan(scales[3]));
  EXPECT_EQ(scales[4], 0.0f);
  for (int e = 64; e < 160; ++e) EXPECT_EQ(codes[e], 0) << e;
}

// The Q8 products: x rounded as QuantizeQ8Reference rounds it, then the exact product.
TEST(MatmulQ8ReferenceTest, ProductsEqualExactProductsOfTheRoundedActivations) {
  std::mt19937 engine(8);
  const int64_t m = 3, n = 5, k = 96;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = normal(engine);
  std::vector<int8_t> codes(x.size());
  std::vector<float> scales(m * k / 32), rounded(x.size());
  for (int64_t i = 0; i < m; ++i) {
    QuantizeQ8Reference(x.data() + i * k, k, codes.data() + i * k, scales.data() + i * k / 32);
  }
  std::vector<int8_t> w_codes(n * k);
  std::vector<uint16_t> w_scales(n * k / 32, 0x3C00);  // bf16 2^-7
  std::uniform_int_distribution<int> code(-127, 127);
  for (int8_t& c : w_codes) c = static_cast<int8_t>(code(engine));
  std::vector<float> y(m * n);
  MatmulInt8Q8Reference(x.data(), m, k, w_codes.data(), w_scales.data(), n, y.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double expected = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        expected += static_cast<double>(codes[i * k + p]) * scales[(i * k + p) / 32] *
                    w_codes[j * k + p] / 128.0;
      }
      EXPECT_NEAR(y[i * n + j], expected, 1e-6 * std::fabs(expected) + 1e-9) << i << "," << j;
    }
  }
}

}  // namespace
}  // namespace strata::kernels
