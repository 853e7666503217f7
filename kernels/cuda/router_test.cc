// MoE router on the GPU vs kernels/reference/router: identical expert ids, weights to f32
// rounding, for K3-, Kimi-Linear- and DeepSeek-style group settings.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "kernels/cuda/router.h"
#include "kernels/cuda/testing.h"
#include "kernels/reference/router.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::TestSeed;
using testing::Uniform;

TEST(CudaRouterTest, SelectsTheSameExpertsAsTheReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 6);
  struct Case {
    RouterParams p;
    bool with_bias;
    int64_t tokens;
  };
  const std::vector<Case> cases = {
      {{896, 16, 1, 1, true, 1.0f}, true, 37},   // K3
      {{256, 8, 1, 1, true, 2.446f}, true, 64},  // Kimi-Linear
      {{256, 8, 8, 4, true, 2.5f}, true, 29},    // DeepSeek-V3 groups
      {{13, 1, 1, 1, true, 1.0f}, false, 5},     // k = 1: no renormalisation
      {{12, 3, 6, 2, false, 1.5f}, true, 11},    // groups of 2, no renormalisation
      {{7, 7, 7, 7, true, 1.0f}, true, 3},       // groups of 1, every expert chosen
      {{1024, 32, 16, 3, true, 1.0f}, true, 4},  // the limits
  };
  for (const Case& tc : cases) {
    const RouterParams& p = tc.p;
    const std::vector<float> logits = Uniform(rng, tc.tokens * p.num_experts, -4, 4);
    const std::vector<float> bias = Uniform(rng, p.num_experts, -0.5f, 0.5f);
    std::vector<int32_t> ids_ref(tc.tokens * p.top_k);
    std::vector<float> w_ref(tc.tokens * p.top_k);
    RouteReference(logits.data(), tc.tokens, tc.with_bias ? bias.data() : nullptr, p,
                   ids_ref.data(), w_ref.data());
    DeviceArray<float> d_logits(logits), d_bias(bias), d_w(tc.tokens * p.top_k);
    DeviceArray<int32_t> d_ids(tc.tokens * p.top_k);
    d_w.Poison();
    d_ids.Poison();
    STRATA_ASSERT_OK(Route(d_logits.get(), tc.tokens, tc.with_bias ? d_bias.get() : nullptr, p,
                           d_ids.get(), d_w.get(), nullptr));
    const std::string name =
        absl::StrCat("E", p.num_experts, "_k", p.top_k, "_g", p.num_groups, "_", p.topk_group);
    EXPECT_EQ(d_ids.Download(), ids_ref) << name;
    STRATA_EXPECT_RELERR("Route_weights", name, d_w.Download(), w_ref, 1e-6);
  }
}

TEST(CudaRouterTest, RejectsUnsupportedParams) {
  RouterParams p{2048, 8, 1, 1, true, 1.0f};  // more experts than the kernel holds
  EXPECT_FALSE(Route(nullptr, 1, nullptr, p, nullptr, nullptr, nullptr).ok());
  p = {16, 8, 3, 1, true, 1.0f};  // 16 % 3 != 0
  EXPECT_FALSE(Route(nullptr, 1, nullptr, p, nullptr, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace strata::kernels::cuda
