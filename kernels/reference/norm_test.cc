#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reference/internal/test_util.h"
#include "kernels/reference/l2_norm.h"
#include "kernels/reference/rms_norm.h"

namespace strata::kernels {
namespace {

using testing::AllClose;
using testing::Rng;

TEST(RmsNormReferenceTest, HandComputedThreeFour) {
  const std::vector<float> x = {3.0f, 4.0f};
  const std::vector<float> weight = {1.0f, 2.0f};
  std::vector<float> y(2);
  RmsNormReference(x.data(), 1, 2, weight.data(), 0.0f, y.data());
  // mean(x²) = 12.5
  EXPECT_FLOAT_EQ(y[0], 3.0 / std::sqrt(12.5));
  EXPECT_FLOAT_EQ(y[1], 2.0 * 4.0 / std::sqrt(12.5));
  RmsNormReference(x.data(), 1, 2, weight.data(), 1e-5f, y.data());
  EXPECT_FLOAT_EQ(y[0], 3.0 / std::sqrt(12.5 + 1e-5));
}

TEST(RmsNormReferenceTest, NullWeightMeansNoScaleAndRowsAreIndependent) {
  const std::vector<float> x = {3.0f, 4.0f, 0.0f, 0.0f, -1.0f, 1.0f};
  std::vector<float> y(6);
  RmsNormReference(x.data(), 3, 2, nullptr, 1e-6f, y.data());
  EXPECT_FLOAT_EQ(y[0], 3.0 / std::sqrt(12.5 + 1e-6));
  EXPECT_FLOAT_EQ(y[1], 4.0 / std::sqrt(12.5 + 1e-6));
  EXPECT_EQ(y[2], 0.0f);  // zero row with eps > 0 stays zero (no NaN)
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_FLOAT_EQ(y[4], -1.0 / std::sqrt(1.0 + 1e-6));
  EXPECT_FLOAT_EQ(y[5], 1.0 / std::sqrt(1.0 + 1e-6));
}

TEST(RmsNormReferenceTest, InPlaceEqualsOutOfPlace) {
  Rng rng(1);
  std::vector<float> x = rng.Normal(3 * 37);
  const std::vector<float> weight = rng.Normal(37);
  std::vector<float> y(x.size());
  RmsNormReference(x.data(), 3, 37, weight.data(), 1e-5f, y.data());
  RmsNormReference(x.data(), 3, 37, weight.data(), 1e-5f, x.data());
  EXPECT_EQ(x, y);
}

TEST(RmsNormReferenceTest, UnitRmsAndScaleInvarianceOverOddDims) {
  Rng rng(2);
  for (int64_t dim : {1, 2, 7, 31, 128, 129, 1000}) {
    const int64_t rows = 3;
    const std::vector<float> x = rng.Normal(rows * dim, 3.0f);
    std::vector<float> scaled(x.size());
    for (size_t i = 0; i < x.size(); ++i) scaled[i] = 7.5f * x[i];
    std::vector<float> y(x.size()), y_scaled(x.size());
    RmsNormReference(x.data(), rows, dim, nullptr, 0.0f, y.data());
    RmsNormReference(scaled.data(), rows, dim, nullptr, 0.0f, y_scaled.data());
    EXPECT_TRUE(AllClose(y_scaled, y, 1e-6, 1e-7)) << "dim " << dim;
    for (int64_t r = 0; r < rows; ++r) {
      double mean_sq = 0.0;
      for (int64_t c = 0; c < dim; ++c) mean_sq += double(y[r * dim + c]) * y[r * dim + c];
      EXPECT_NEAR(mean_sq / dim, 1.0, 1e-6) << "dim " << dim;
    }
  }
}

TEST(L2NormReferenceTest, HandComputedThreeFour) {
  const std::vector<float> x = {3.0f, 4.0f};
  std::vector<float> y(2);
  L2NormReference(x.data(), 1, 2, 0.0f, 1.0f, y.data());
  EXPECT_FLOAT_EQ(y[0], 0.6f);
  EXPECT_FLOAT_EQ(y[1], 0.8f);
  L2NormReference(x.data(), 1, 2, 1e-6f, 0.5f, y.data());
  EXPECT_FLOAT_EQ(y[0], 0.5 * 3.0 / std::sqrt(25.0 + 1e-6));
  EXPECT_FLOAT_EQ(y[1], 0.5 * 4.0 / std::sqrt(25.0 + 1e-6));
}

TEST(L2NormReferenceTest, OutputNormIsScaleOverOddDimsInPlace) {
  Rng rng(3);
  for (int64_t dim : {1, 3, 16, 24, 97, 128}) {
    const int64_t rows = 4;
    std::vector<float> x = rng.Normal(rows * dim);
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
    L2NormReference(x.data(), rows, dim, 0.0f, scale, x.data());
    for (int64_t r = 0; r < rows; ++r) {
      double sum_sq = 0.0;
      for (int64_t c = 0; c < dim; ++c) sum_sq += double(x[r * dim + c]) * x[r * dim + c];
      EXPECT_NEAR(std::sqrt(sum_sq), scale, 1e-6) << "dim " << dim;
    }
  }
}

}  // namespace
}  // namespace strata::kernels
