#include "kernels/cpu/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/internal/isa_testing.h"
#include "kernels/cpu/internal/random_testing.h"
#include "kernels/reference/router.h"

namespace strata::kernels::cpu {
namespace {

using internal::IsaCap;
using internal::SupportedIsas;

// Scores are f32 within 2 ulp of the reference's f64-rounded ones; weights are ratios of them.
constexpr double kWeightRelTol = 2e-6;

using internal::Normal;

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

void ExpectSame(const Routed& got, const Routed& want, const std::string& what) {
  ASSERT_EQ(got.ids, want.ids) << what;
  for (size_t i = 0; i < got.weights.size(); ++i) {
    EXPECT_NEAR(got.weights[i], want.weights[i], kWeightRelTol * std::fabs(want.weights[i]))
        << what << " weight " << i;
  }
}

struct RouterCase {
  RouterParams params;
  bool with_bias;
};

const RouterCase kCases[] = {
    {{1, 1}, false},
    {{7, 3}, true},
    {{17, 5, 1, 1, true, 2.446f}, true},
    {{31, 1}, true},
    {{64, 6, 8, 3}, true},
    {{97, 97}, false},
    {{256, 8, 8, 4, true, 2.5f}, true},
    {{896, 16}, true},
    {{60, 4, 3, 2, false, 1.5f}, true},
};

TEST(CpuRouterTest, SigmoidMatchesReferenceOnEveryIsa) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(5);
    for (const RouterCase& c : kCases) {
      const RouterParams& p = c.params;
      for (int64_t tokens : {1, 5, 40}) {  // 40: the OpenMP path
        const std::vector<float> logits = Normal(rng, tokens * p.num_experts, 2.0f);
        const std::vector<float> bias = Normal(rng, p.num_experts, 0.1f);
        const float* b = c.with_bias ? bias.data() : nullptr;
        Routed got{std::vector<int32_t>(tokens * p.top_k), std::vector<float>(tokens * p.top_k)};
        Routed want = got;
        Route(logits.data(), tokens, b, p, got.ids.data(), got.weights.data());
        RouteReference(logits.data(), tokens, b, p, want.ids.data(), want.weights.data());
        ExpectSame(got, want,
                   std::string(IsaName(isa)) + " E=" + std::to_string(p.num_experts) +
                       " k=" + std::to_string(p.top_k) + " tokens=" + std::to_string(tokens));
      }
    }
  }
}

// Equal logits give bit-equal scores in both implementations, so ties must break the same way
// (lower expert id first), also between groups.
TEST(CpuRouterTest, TiesBreakTowardsTheLowerExpertIdLikeTheReference) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    for (const RouterParams& p :
         {RouterParams{40, 7}, RouterParams{40, 6, 8, 3}, RouterParams{33, 33}}) {
      std::vector<float> logits(static_cast<size_t>(p.num_experts));
      for (int e = 0; e < p.num_experts; ++e) logits[e] = float(e % 3) - 1.0f;  // −1, 0, 1
      Routed got{std::vector<int32_t>(p.top_k), std::vector<float>(p.top_k)}, want = got;
      Route(logits.data(), 1, nullptr, p, got.ids.data(), got.weights.data());
      RouteReference(logits.data(), 1, nullptr, p, want.ids.data(), want.weights.data());
      ExpectSame(got, want, IsaName(isa));
    }
  }
}

// Softmax scoring against an independent f64 computation of the same contract.
Routed SoftmaxRoute(const std::vector<float>& row, const std::vector<float>& bias,
                    const RouterParams& p) {
  const int n = p.num_experts;
  const double max = *std::max_element(row.begin(), row.end());
  std::vector<double> e(n);
  double total = 0;
  for (int i = 0; i < n; ++i) total += e[i] = std::exp(row[i] - max);
  std::vector<float> s(n), biased(n);
  for (int i = 0; i < n; ++i) {
    s[i] = static_cast<float>(e[i] / total);
    biased[i] = s[i] + bias[i];
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return biased[a] > biased[b]; });
  Routed r;
  double sum = 0;
  for (int i = 0; i < p.top_k; ++i) sum += s[order[i]];
  for (int i = 0; i < p.top_k; ++i) {
    r.ids.push_back(order[i]);
    r.weights.push_back(static_cast<float>(s[order[i]] / (sum + 1e-20) * p.scaling));
  }
  return r;
}

TEST(CpuRouterTest, SoftmaxScoringMatchesAnIndependentComputation) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(6);
    for (const RouterParams& p : {RouterParams{1, 1}, RouterParams{13, 4, 1, 1, true, 2.0f},
                                  RouterParams{64, 8}, RouterParams{257, 9}}) {
      const std::vector<float> row = Normal(rng, p.num_experts, 1.5f);
      const std::vector<float> bias = Normal(rng, p.num_experts, 0.01f);
      Routed got{std::vector<int32_t>(p.top_k), std::vector<float>(p.top_k)};
      Route(row.data(), 1, bias.data(), p, got.ids.data(), got.weights.data(),
            RouterScoring::kSoftmax);
      ExpectSame(got, SoftmaxRoute(row, bias, p),
                 std::string(IsaName(isa)) + " E=" + std::to_string(p.num_experts));
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cpu
