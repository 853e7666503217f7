#include "kernels/reference/glu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reference/internal/test_util.h"

namespace strata::kernels {
namespace {

using testing::AllFinite;
using testing::Rng;

using testing::Sigmoid;

// The SiTU formula written out: β1·tanh(g/β1)·σ(g) · β2·tanh(u/β2).
double Situ(double g, double u, double beta1, double beta2) {
  return beta1 * std::tanh(g / beta1) * Sigmoid(g) * beta2 * std::tanh(u / beta2);
}

TEST(GluReferenceTest, SwiGluHandComputed) {
  const std::vector<float> gate = {1.0f, -2.0f, 0.0f};
  const std::vector<float> up = {2.0f, 3.0f, 5.0f};
  std::vector<float> out(3);
  GluReference(gate.data(), up.data(), 3, GluParams{GluKind::kSwiGlu}, out.data());
  EXPECT_FLOAT_EQ(out[0], 2.0 / (1.0 + std::exp(-1.0)));
  EXPECT_FLOAT_EQ(out[1], 3.0 * -2.0 / (1.0 + std::exp(2.0)));
  EXPECT_EQ(out[2], 0.0f);
}

TEST(GluReferenceTest, SituHandComputedAtK3Betas) {
  const std::vector<float> gate = {2.0f, -3.0f, 0.5f};
  const std::vector<float> up = {30.0f, -1.0f, 100.0f};
  std::vector<float> out(3);
  GluReference(gate.data(), up.data(), 3, GluParams{GluKind::kSitu, 4.0f, 25.0f}, out.data());
  EXPECT_FLOAT_EQ(out[0], Situ(2.0, 30.0, 4.0, 25.0));
  EXPECT_FLOAT_EQ(out[1], Situ(-3.0, -1.0, 4.0, 25.0));
  EXPECT_FLOAT_EQ(out[2], Situ(0.5, 100.0, 4.0, 25.0));
}

TEST(GluReferenceTest, SituWithoutUpCapLeavesUpLinear) {
  const std::vector<float> gate = {2.0f, -1.0f};
  const std::vector<float> up = {1000.0f, -7.0f};
  std::vector<float> out(2);
  for (float beta2 : {0.0f, -1.0f}) {
    GluReference(gate.data(), up.data(), 2, GluParams{GluKind::kSitu, 4.0f, beta2}, out.data());
    EXPECT_FLOAT_EQ(out[0], 4.0 * std::tanh(0.5) * Sigmoid(2.0) * 1000.0);
    EXPECT_FLOAT_EQ(out[1], 4.0 * std::tanh(-0.25) * Sigmoid(-1.0) * -7.0);
  }
}

TEST(GluReferenceTest, SituIsBoundedByBeta1TimesBeta2) {
  Rng rng(6);
  std::vector<float> gate = rng.Normal(1001, 1e3f);
  std::vector<float> up = rng.Normal(1001, 1e3f);
  gate.push_back(1e30f);
  up.push_back(-1e30f);
  std::vector<float> out(gate.size());
  GluReference(gate.data(), up.data(), static_cast<int64_t>(gate.size()),
               GluParams{GluKind::kSitu, 4.0f, 25.0f}, out.data());
  EXPECT_TRUE(AllFinite(out));
  for (float v : out) EXPECT_LE(std::fabs(v), 100.0f);
  EXPECT_FLOAT_EQ(out.back(), -100.0f);
}

TEST(GluReferenceTest, SituMatchesSwiGluNearZero) {
  const std::vector<float> gate = {0.01f, -0.02f};
  const std::vector<float> up = {0.03f, 0.01f};
  std::vector<float> situ(2), swiglu(2);
  GluReference(gate.data(), up.data(), 2, GluParams{GluKind::kSitu, 4.0f, 25.0f}, situ.data());
  GluReference(gate.data(), up.data(), 2, GluParams{GluKind::kSwiGlu}, swiglu.data());
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(situ[i] / swiglu[i], 1.0, 1e-4);
}

TEST(GluReferenceTest, OutputMayAliasEitherInput) {
  Rng rng(7);
  const std::vector<float> gate = rng.Normal(33, 3.0f);
  const std::vector<float> up = rng.Normal(33, 3.0f);
  for (GluKind kind : {GluKind::kSwiGlu, GluKind::kSitu}) {
    const GluParams params{kind, 4.0f, 25.0f};
    std::vector<float> expected(33);
    GluReference(gate.data(), up.data(), 33, params, expected.data());
    std::vector<float> g = gate, u = up;
    GluReference(g.data(), up.data(), 33, params, g.data());
    GluReference(gate.data(), u.data(), 33, params, u.data());
    EXPECT_EQ(g, expected);
    EXPECT_EQ(u, expected);
  }
}

}  // namespace
}  // namespace strata::kernels
