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

// RouteAndPermute: the same ids and weights as Route, the pairs grouped as MoePermute groups them
// (same offsets; the invariants checked from the host), in one launch at decode sizes and through
// Route + MoePermute past the limit; padding tokens and tensor parallelism's map folded in; the
// done counter back at zero after every call (each case runs twice on it).
TEST(CudaRouterTest, RouteAndPermuteGroupsThePairsItChose) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 7);
  struct Case {
    RouterParams p;
    int64_t tokens;
    int32_t live;  // −1: no live count
    int ranks;     // > 1: this rank runs every ranks-th expert
  };
  const std::vector<Case> cases = {
      {{256, 8, 1, 1, true, 2.446f}, 1, -1, 1},   // Kimi-Linear, batch 1
      {{256, 8, 1, 1, true, 2.446f}, 64, 37, 1},  // a padded graph bucket
      {{896, 16, 1, 1, true, 1.0f}, 33, 33, 8},   // K3 at TP8
      {{13, 3, 1, 1, false, 1.0f}, 7, -1, 2},     // odd sizes
      {{64, 32, 1, 1, true, 1.0f}, 513, 500, 3},  // 16,416 pairs: Route, then MoePermute
  };
  DeviceArray<int32_t> d_done(std::vector<int32_t>{0});
  for (const Case& tc : cases) {
    const RouterParams& p = tc.p;
    const int64_t pairs = tc.tokens * p.top_k;
    std::vector<int32_t> local_of(static_cast<size_t>(p.num_experts), -1);
    int local = 0;
    for (int e = 0; e < p.num_experts; ++e) {
      if (tc.ranks == 1 || e % tc.ranks == 1) local_of[static_cast<size_t>(e)] = local++;
    }
    const std::vector<float> logits = Uniform(rng, tc.tokens * p.num_experts, -4, 4);
    const std::vector<float> bias = Uniform(rng, p.num_experts, -0.5f, 0.5f);
    DeviceArray<float> d_logits(logits), d_bias(bias), d_w(pairs), d_w_ref(pairs);
    DeviceArray<int32_t> d_ids(pairs), d_ids_ref(pairs), d_offsets(local + 1),
        d_offsets_ref(local + 1), d_token(pairs), d_token_ref(pairs), d_row(pairs),
        d_row_ref(pairs), d_live(std::vector<int32_t>{tc.live}), d_local(local_of);
    DeviceArray<unsigned char> d_ws(MoePermuteWorkspaceBytes(local));
    RoutePermutation route;
    route.num_experts = local;
    if (tc.live >= 0) route.options.live_tokens = d_live.get();
    if (tc.ranks > 1) {
      route.options.local_of = d_local.get();
      route.options.id_space = p.num_experts;
    }
    route.expert_offsets = d_offsets.get();
    route.permuted_token = d_token.get();
    route.pair_row = d_row.get();
    route.done_counter = d_done.get();
    route.workspace = d_ws.get();
    route.workspace_bytes = static_cast<int64_t>(d_ws.size());
    STRATA_ASSERT_OK(
        Route(d_logits.get(), tc.tokens, d_bias.get(), p, d_ids_ref.get(), d_w_ref.get(), nullptr));
    STRATA_ASSERT_OK(MoePermute(d_ids_ref.get(), tc.tokens, p.top_k, local, d_ws.get(),
                                static_cast<int64_t>(d_ws.size()), d_offsets_ref.get(),
                                d_token_ref.get(), d_row_ref.get(), nullptr, route.options));
    const std::string name = absl::StrCat("E", p.num_experts, "_k", p.top_k, "_T", tc.tokens,
                                          "_live", tc.live, "_ranks", tc.ranks);
    for (int run = 0; run < 2; ++run) {
      d_offsets.Poison();
      d_token.Poison();
      d_row.Poison();
      STRATA_ASSERT_OK(RouteAndPermute(d_logits.get(), tc.tokens, d_bias.get(), p, d_ids.get(),
                                       d_w.get(), route, nullptr));
      const std::vector<int32_t> ids = d_ids.Download();
      EXPECT_EQ(ids, d_ids_ref.Download()) << name;
      EXPECT_EQ(d_w.Download(), d_w_ref.Download()) << name;
      EXPECT_EQ(d_offsets.Download(), d_offsets_ref.Download()) << name;
      EXPECT_EQ(d_done.Download(), std::vector<int32_t>{0}) << name << ": counter left set";
      std::vector<int32_t> expert(ids.size());
      for (size_t q = 0; q < ids.size(); ++q) {
        const bool live = tc.live < 0 || static_cast<int32_t>(q / p.top_k) < tc.live;
        expert[q] = live ? local_of[static_cast<size_t>(ids[q])] : -1;
      }
      testing::CheckMoePermutation(expert, p.top_k, local, d_offsets.Download(), d_token.Download(),
                                   d_row.Download(), absl::StrCat(name, " run ", run));
    }
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
