#include "kernels/reference/kda_gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/reference/internal/test_util.h"

namespace strata::kernels {
namespace {

using testing::AllFinite;
using testing::Rng;

using testing::Sigmoid;
double Softplus(double x) { return std::log(1.0 + std::exp(x)); }

// T = 1, H = 2, D = 2: f + dt_bias = [0, 1.5 | −0.5, 2], exp(A_log) = [1 | 2].
struct HandCase {
  std::vector<float> f = {0.0f, 1.5f, -1.0f, 3.0f};
  std::vector<float> dt_bias = {0.0f, 0.0f, 0.5f, -1.0f};
  std::vector<float> a_log = {0.0f, static_cast<float>(std::log(2.0))};
};

TEST(KdaGateReferenceTest, KimiLinearGateHandComputed) {
  HandCase c;
  std::vector<float> g(4);
  KdaGateReference(c.f.data(), 1, 2, 2, c.a_log.data(), c.dt_bias.data(), false, 0.0f, g.data());
  EXPECT_FLOAT_EQ(g[0], -std::log(2.0));
  EXPECT_FLOAT_EQ(g[1], -Softplus(1.5));
  EXPECT_FLOAT_EQ(g[2], -2.0 * Softplus(-0.5));
  EXPECT_FLOAT_EQ(g[3], -2.0 * Softplus(2.0));
}

TEST(KdaGateReferenceTest, LowerBoundGateHandComputed) {
  HandCase c;
  std::vector<float> g(4);
  KdaGateReference(c.f.data(), 1, 2, 2, c.a_log.data(), c.dt_bias.data(), true, -5.0f, g.data());
  EXPECT_FLOAT_EQ(g[0], -2.5);
  EXPECT_FLOAT_EQ(g[1], -5.0 * Sigmoid(1.5));
  EXPECT_FLOAT_EQ(g[2], -5.0 * Sigmoid(-1.0));
  EXPECT_FLOAT_EQ(g[3], -5.0 * Sigmoid(4.0));
}

TEST(KdaGateReferenceTest, ReadsOnlyTheFirstNumHeadsEntriesOfALog) {
  // K3 stores A_log as [head_dim] zero-padded; here the padding is NaN and must not be read.
  HandCase c;
  std::vector<float> a_log = {c.a_log[0], c.a_log[1], std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::quiet_NaN()};
  for (bool bounded : {false, true}) {
    std::vector<float> g(4);
    KdaGateReference(c.f.data(), 1, 2, 2, a_log.data(), c.dt_bias.data(), bounded, -5.0f, g.data());
    EXPECT_TRUE(AllFinite(g)) << "bounded=" << bounded;
  }
}

// Strictly inside (lb, 0) / below 0 while |exp(A_log)·(f + dt_bias)| stays moderate (≲ 15);
// beyond that f32 rounding may reach the closed bounds, which the wide sweep allows.
TEST(KdaGateReferenceTest, RangesOfBothVariantsOnRandomInputs) {
  Rng rng(5);
  const int64_t tokens = 37;
  for (float spread : {1.0f, 30.0f}) {
    const bool strict = spread == 1.0f;
    for (int heads : {1, 3}) {
      for (int dim : {16, 24}) {
        const int64_t n = tokens * heads * dim;
        const std::vector<float> f = rng.Normal(n, spread);
        const std::vector<float> dt_bias = rng.Normal(heads * dim, 0.3f);
        const std::vector<float> a_log = rng.Uniform(heads, -1.0f, 0.5f);
        std::vector<float> g_k3(n), g_kl(n);
        KdaGateReference(f.data(), tokens, heads, dim, a_log.data(), dt_bias.data(), true, -5.0f,
                         g_k3.data());
        KdaGateReference(f.data(), tokens, heads, dim, a_log.data(), dt_bias.data(), false, 0.0f,
                         g_kl.data());
        for (int64_t i = 0; i < n; ++i) {
          if (strict) {
            ASSERT_GT(g_k3[i], -5.0f) << i;
            ASSERT_LT(g_k3[i], 0.0f) << i;
            ASSERT_LT(g_kl[i], 0.0f) << i;
          } else {
            ASSERT_GE(g_k3[i], -5.0f) << i;
            ASSERT_LE(g_k3[i], 0.0f) << i;
            ASSERT_LE(g_kl[i], 0.0f) << i;
            ASSERT_TRUE(std::isfinite(g_kl[i])) << i;
          }
        }
      }
    }
  }
}

TEST(KdaGateReferenceTest, ExtremeInputsStayFiniteAndInRange) {
  const std::vector<float> f = {1e4f, -1e4f, 100.0f, -100.0f};
  const std::vector<float> dt_bias(4, 0.0f);
  const std::vector<float> a_log = {0.0f};
  std::vector<float> g(4);
  KdaGateReference(f.data(), 1, 1, 4, a_log.data(), dt_bias.data(), false, 0.0f, g.data());
  EXPECT_TRUE(AllFinite(g));
  EXPECT_FLOAT_EQ(g[0], -1e4f);  // softplus(x) → x, no overflow of eˣ
  EXPECT_FLOAT_EQ(g[2], -100.0f);
  EXPECT_LE(g[1], 0.0f);
  EXPECT_GT(g[3], -1e-40f);  // softplus(−100) = e^−100 ≈ 3.7e−44
  EXPECT_LE(g[3], 0.0f);
  KdaGateReference(f.data(), 1, 1, 4, a_log.data(), dt_bias.data(), true, -5.0f, g.data());
  EXPECT_TRUE(AllFinite(g));
  EXPECT_FLOAT_EQ(g[0], -5.0f);
  EXPECT_FLOAT_EQ(g[2], -5.0f);
  EXPECT_LE(g[1], 0.0f);
  EXPECT_GT(g[1], -1e-30f);
}

TEST(SigmoidReferenceTest, ValuesSymmetryAndNoOverflow) {
  const std::vector<float> x = {0.0f, 1.0f, -1.0f, 50.0f, -50.0f, 1000.0f, -1000.0f};
  std::vector<float> y(x.size());
  SigmoidReference(x.data(), static_cast<int64_t>(x.size()), y.data());
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_FLOAT_EQ(y[1], Sigmoid(1.0));
  EXPECT_FLOAT_EQ(y[2], Sigmoid(-1.0));
  EXPECT_FLOAT_EQ(y[1] + y[2], 1.0f);
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_FLOAT_EQ(y[4], std::exp(-50.0));
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_EQ(y[6], 0.0f);
}

}  // namespace
}  // namespace strata::kernels
