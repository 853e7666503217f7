#include "engine/demo/weight_init.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace strata::engine::demo {
namespace {

TEST(SplitMix64Test, MatchesThePublishedSequenceForSeedZero) {
  // First outputs of Vigna's splitmix64.c with x = 0.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(rng.Next(), 0x06c45d188009454fULL);
}

TEST(SplitMix64Test, UniformStaysInUnitIntervalWithMeanOneHalf) {
  SplitMix64 rng(42);
  double sum = 0.0;
  constexpr int kCount = 200000;
  for (int i = 0; i < kCount; ++i) {
    const double u = rng.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / kCount, 0.5, 0.005);
}

TEST(SplitMix64Test, NormalHasZeroMeanUnitVarianceAndGaussianTails) {
  SplitMix64 rng(7);
  constexpr int kCount = 400000;
  double sum = 0.0, sum_sq = 0.0;
  int beyond_two = 0;
  for (int i = 0; i < kCount; ++i) {
    const double z = rng.Normal();
    sum += z;
    sum_sq += z * z;
    beyond_two += std::fabs(z) > 2.0;
  }
  const double mean = sum / kCount;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / kCount - mean * mean, 1.0, 0.01);
  EXPECT_NEAR(static_cast<double>(beyond_two) / kCount, 0.0455, 0.002);  // P(|Z| > 2)
}

TEST(TensorSeedTest, DependsOnBothSeedAndName) {
  EXPECT_EQ(TensorSeed(1, "a.weight"), TensorSeed(1, "a.weight"));
  EXPECT_NE(TensorSeed(1, "a.weight"), TensorSeed(2, "a.weight"));
  EXPECT_NE(TensorSeed(1, "a.weight"), TensorSeed(1, "b.weight"));
}

TEST(SampleValuesTest, SameSeedSameValuesAndZeroPaddingBeyondNumRandom) {
  InitSpec init = InitSpec::Uniform(-0.7, 0.7);
  init.num_random = 3;
  const std::vector<float> a = SampleValues(init, 8, 99);
  EXPECT_EQ(a, SampleValues(init, 8, 99));
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(a[i], -0.7f);
    EXPECT_LT(a[i], 0.7f);
    EXPECT_NE(a[i], 0.0f);
  }
  for (int i = 3; i < 8; ++i) EXPECT_EQ(a[i], 0.0f);
}

TEST(SampleValuesTest, NormalSpecScalesAndShifts) {
  const std::vector<float> v = SampleValues(InitSpec::Normal(1.0, 0.1), 100000, 5);
  double sum = 0.0, sum_sq = 0.0;
  for (float x : v) {
    sum += x;
    sum_sq += (x - 1.0) * (x - 1.0);
  }
  EXPECT_NEAR(sum / v.size(), 1.0, 0.002);
  EXPECT_NEAR(std::sqrt(sum_sq / v.size()), 0.1, 0.002);
}

TEST(EncodeValuesTest, WritesLittleEndianF32AndRoundedBf16) {
  // 1.0f = 0x3f800000; 1 + 2^-8 is a bf16 tie that rounds to even (0x3f80); 1 + 3·2^-9 rounds
  // up to 0x3f81.
  const std::vector<float> values = {1.0f, 1.0f + 0x1.0p-8f, 1.0f + 0x1.8p-8f};
  EXPECT_EQ(EncodeValues({1.0f}, DType::kF32), (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x3f}));
  EXPECT_EQ(EncodeValues(values, DType::kBF16),
            (std::vector<uint8_t>{0x80, 0x3f, 0x80, 0x3f, 0x81, 0x3f}));
}

}  // namespace
}  // namespace strata::engine::demo
