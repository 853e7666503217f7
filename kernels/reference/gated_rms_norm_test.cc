#include "kernels/reference/gated_rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reference/internal/test_util.h"
#include "kernels/reference/kda_gate.h"
#include "kernels/reference/rms_norm.h"

namespace strata::kernels {
namespace {

using testing::AllClose;
using testing::Rng;

using testing::Sigmoid;

TEST(GatedRmsNormReferenceTest, HandComputedTwoHeadsSharedWeight) {
  // T = 1, H = 2, D = 2; head 0 o = [3, 4] (mean² 12.5), head 1 o = [1, −1] (mean² 1).
  const std::vector<float> o = {3.0f, 4.0f, 1.0f, -1.0f};
  const std::vector<float> gate = {0.0f, 2.0f, -1.0f, 100.0f};
  const std::vector<float> weight = {1.0f, 0.5f};
  std::vector<float> y(4);
  GatedRmsNormReference(o.data(), gate.data(), 1, 2, 2, weight.data(), 0.0f, y.data());
  EXPECT_FLOAT_EQ(y[0], 3.0 / std::sqrt(12.5) * 1.0 * 0.5);
  EXPECT_FLOAT_EQ(y[1], 4.0 / std::sqrt(12.5) * 0.5 * Sigmoid(2.0));
  EXPECT_FLOAT_EQ(y[2], 1.0 * 1.0 * Sigmoid(-1.0));
  EXPECT_FLOAT_EQ(y[3], -1.0 * 0.5 * Sigmoid(100.0));
}

TEST(GatedRmsNormReferenceTest, EqualsPerHeadRmsNormTimesSigmoid) {
  Rng rng(4);
  for (int heads : {1, 3}) {
    for (int dim : {16, 24, 33}) {
      const int64_t tokens = 5;
      const int64_t n = tokens * heads * dim;
      const std::vector<float> o = rng.Normal(n, 2.0f);
      const std::vector<float> gate = rng.Normal(n, 3.0f);
      const std::vector<float> weight = rng.Normal(dim);
      std::vector<float> y(n);
      GatedRmsNormReference(o.data(), gate.data(), tokens, heads, dim, weight.data(), 1e-5f,
                            y.data());
      std::vector<float> normed(n), sig(n), expected(n);
      RmsNormReference(o.data(), tokens * heads, dim, weight.data(), 1e-5f, normed.data());
      SigmoidReference(gate.data(), n, sig.data());
      for (int64_t i = 0; i < n; ++i) expected[i] = normed[i] * sig[i];
      EXPECT_TRUE(AllClose(y, expected, 1e-6, 1e-7)) << "H=" << heads << " D=" << dim;
      std::vector<float> in_place = o;
      GatedRmsNormReference(in_place.data(), gate.data(), tokens, heads, dim, weight.data(), 1e-5f,
                            in_place.data());
      EXPECT_EQ(in_place, y);
    }
  }
}

}  // namespace
}  // namespace strata::kernels
