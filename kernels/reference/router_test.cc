#include "kernels/reference/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "kernels/reference/internal/test_util.h"

namespace strata::kernels {
namespace {

using testing::Rng;

// The logit whose sigmoid is p.
float Logit(double p) { return static_cast<float>(std::log(p / (1.0 - p))); }

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed Route(const std::vector<float>& logits, const std::vector<float>* bias,
             const RouterParams& params) {
  const int64_t tokens = static_cast<int64_t>(logits.size()) / params.num_experts;
  Routed r{std::vector<int32_t>(tokens * params.top_k), std::vector<float>(tokens * params.top_k)};
  RouteReference(logits.data(), tokens, bias != nullptr ? bias->data() : nullptr, params,
                 r.ids.data(), r.weights.data());
  return r;
}

TEST(RouteReferenceTest, TopTwoRenormalisedAndScaledHandComputed) {
  // s = [0.5, 0.75, 0.25, 0.9]
  const std::vector<float> logits = {0.0f, Logit(0.75), Logit(0.25), Logit(0.9)};
  const Routed r = Route(logits, nullptr, RouterParams{4, 2, 1, 1, true, 2.0f});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 1}));
  EXPECT_FLOAT_EQ(r.weights[0], 0.9 / 1.65 * 2.0);
  EXPECT_FLOAT_EQ(r.weights[1], 0.75 / 1.65 * 2.0);
}

TEST(RouteReferenceTest, BiasChangesSelectionButNotWeights) {
  const std::vector<float> logits = {0.0f, Logit(0.75), Logit(0.25), Logit(0.9)};
  const std::vector<float> bias = {0.0f, 0.0f, 0.8f, 0.0f};  // s + b = [0.5, 0.75, 1.05, 0.9]
  const Routed r = Route(logits, &bias, RouterParams{4, 2, 1, 1, true, 1.0f});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3}));
  EXPECT_FLOAT_EQ(r.weights[0], 0.25 / 1.15);  // unbiased s, renormalised
  EXPECT_FLOAT_EQ(r.weights[1], 0.9 / 1.15);
}

TEST(RouteReferenceTest, NoRenormalisationAndTopOneUseRawScores) {
  const std::vector<float> logits = {0.0f, Logit(0.75), Logit(0.25), Logit(0.9)};
  Routed r = Route(logits, nullptr, RouterParams{4, 2, 1, 1, false, 2.0f});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 1}));
  EXPECT_FLOAT_EQ(r.weights[0], 0.9 * 2.0);
  EXPECT_FLOAT_EQ(r.weights[1], 0.75 * 2.0);
  r = Route(logits, nullptr, RouterParams{4, 1, 1, 1, true, 1.5f});  // k = 1: never renormalised
  EXPECT_EQ(r.ids, (std::vector<int32_t>{3}));
  EXPECT_FLOAT_EQ(r.weights[0], 0.9 * 1.5);
}

TEST(RouteReferenceTest, TiesGoToTheLowerExpertId) {
  const std::vector<float> logits(6, 0.3f);
  const Routed r = Route(logits, nullptr, RouterParams{6, 3});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, 2}));
  for (float w : r.weights) EXPECT_FLOAT_EQ(w, 1.0f / 3.0f);
}

TEST(RouteReferenceTest, GroupLimitChangesTheSelection) {
  // 4 groups of 2. Group scores (sum of top 2): g0 = 1.0, g1 = 1.2, g2 = 1.1, g3 = 0.2.
  // Globally the best two are e0 (0.95) and e2 (0.6); with topk_group = 2 only g1, g2 remain.
  const std::vector<float> logits = {Logit(0.95), Logit(0.05), Logit(0.6), Logit(0.6),
                                     Logit(0.55), Logit(0.55), Logit(0.1), Logit(0.1)};
  const Routed flat = Route(logits, nullptr, RouterParams{8, 2, 1, 1});
  EXPECT_EQ(flat.ids, (std::vector<int32_t>{0, 2}));
  const Routed grouped = Route(logits, nullptr, RouterParams{8, 2, 4, 2});
  EXPECT_EQ(grouped.ids, (std::vector<int32_t>{2, 3}));
  EXPECT_FLOAT_EQ(grouped.weights[0], 0.5f);
  EXPECT_FLOAT_EQ(grouped.weights[1], 0.5f);
  const Routed three = Route(logits, nullptr, RouterParams{8, 3, 4, 2});
  EXPECT_EQ(three.ids, (std::vector<int32_t>{2, 3, 4}));
}

TEST(RouteReferenceTest, ExpertsOfDroppedGroupsScoreZeroNotMinusInfinity) {
  // Biased scores: group 0 = [−0.2, −0.3] (sum −0.5, kept), group 1 = [−0.25, −0.9] (dropped).
  // Dropped experts select with 0.0, which beats the negative kept scores.
  const std::vector<float> logits = {Logit(0.5), Logit(0.4), Logit(0.45), Logit(0.1)};
  const std::vector<float> bias = {-0.7f, -0.7f, -0.7f, -1.0f};
  const Routed r = Route(logits, &bias, RouterParams{4, 2, 2, 1});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3}));
  EXPECT_FLOAT_EQ(r.weights[0], 0.45 / 0.55);
  EXPECT_FLOAT_EQ(r.weights[1], 0.1 / 0.55);
}

TEST(RouteReferenceTest, RandomSweepInvariants) {
  Rng rng(12);
  const RouterParams configs[] = {{7, 1},
                                  {16, 4, 1, 1, true, 2.446f},
                                  {64, 8, 8, 4, true, 2.5f},
                                  {12, 3, 3, 2, false, 1.0f},
                                  {5, 5}};
  for (const RouterParams& p : configs) {
    const int64_t tokens = 9;
    const std::vector<float> logits = rng.Normal(tokens * p.num_experts, 2.0f);
    const std::vector<float> bias = rng.Normal(p.num_experts, 0.1f);
    const Routed r = Route(logits, &bias, p);
    for (int64_t t = 0; t < tokens; ++t) {
      const std::set<int32_t> distinct(r.ids.begin() + t * p.top_k,
                                       r.ids.begin() + (t + 1) * p.top_k);
      EXPECT_EQ(static_cast<int>(distinct.size()), p.top_k);
      double sum = 0.0;
      for (int i = 0; i < p.top_k; ++i) {
        const int32_t e = r.ids[t * p.top_k + i];
        ASSERT_TRUE(e >= 0 && e < p.num_experts);
        const double s = 1.0 / (1.0 + std::exp(-logits[t * p.num_experts + e]));
        sum += r.weights[t * p.top_k + i];
        if (!p.renormalize || p.top_k == 1) {
          EXPECT_NEAR(r.weights[t * p.top_k + i], s * p.scaling, 1e-6);
        }
        if (i > 0 && p.num_groups == 1) {  // ordered by descending biased score
          const int32_t prev = r.ids[t * p.top_k + i - 1];
          const double sp = 1.0 / (1.0 + std::exp(-logits[t * p.num_experts + prev]));
          EXPECT_GE(sp + bias[prev], s + bias[e] - 1e-6);
        }
      }
      if (p.renormalize && p.top_k > 1) {
        EXPECT_NEAR(sum, p.scaling, 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace strata::kernels
