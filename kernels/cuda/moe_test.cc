// cuBLAS GEMM wrapper, MoE permutation and the grouped expert pipeline on the GPU vs
// kernels/reference (MatmulBf16Reference, GluReference).
#include <algorithm>
#include <array>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/testing.h"
#include "kernels/reference/glu.h"
#include "kernels/reference/matmul.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::FromBf16;
using testing::TestSeed;
using testing::ToBf16InPlace;
using testing::Uniform;

TEST(CudaGemmTest, GemmBf16MatchesReferenceOnOddShapes) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 7);
  absl::StatusOr<CublasHandle> handle = CublasHandle::Create();
  ASSERT_TRUE(handle.ok()) << handle.status();
  for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{
           {1, 8, 1}, {3, 64, 5}, {17, 96, 129}, {64, 2304, 300}, {5, 7168, 64}}) {
    std::vector<float> x = Uniform(rng, m * k, -1, 1), w = Uniform(rng, n * k, -1, 1);
    const std::vector<uint16_t> x_bits = ToBf16InPlace(x), w_bits = ToBf16InPlace(w);
    std::vector<float> expected(m * n);
    MatmulBf16Reference(x.data(), m, k, w_bits.data(), n, expected.data());
    DeviceArray<uint16_t> d_x(x_bits), d_w(w_bits), d_y16(m * n);
    DeviceArray<float> d_y(m * n);
    d_y.Poison();
    d_y16.Poison();
    STRATA_ASSERT_OK(
        GemmBf16(handle->get(), d_x.get(), m, k, k, d_w.get(), n, d_y.get(), n, nullptr));
    STRATA_ASSERT_OK(
        GemmBf16(handle->get(), d_x.get(), m, k, k, d_w.get(), n, d_y16.get(), n, nullptr));
    const std::string name = absl::StrCat(m, "x", k, "x", n);
    STRATA_EXPECT_RELERR("GemmBf16_f32", name, d_y.Download(), expected, 5e-5);
    STRATA_EXPECT_RELERR("GemmBf16_bf16", name, FromBf16(d_y16.Download()), expected, 4e-3);
    // y += x·Wᵀ onto what y holds.
    const std::vector<float> before = Uniform(rng, m * n, -4, 4);
    std::vector<float> sum(m * n);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = before[i] + expected[i];
    DeviceArray<float> d_acc(before);
    STRATA_ASSERT_OK(GemmBf16Accumulate(handle->get(), d_x.get(), m, k, k, d_w.get(), n,
                                        d_acc.get(), n, nullptr));
    STRATA_EXPECT_RELERR("GemmBf16Accumulate", name, d_acc.Download(), sum, 5e-5);
  }
}

struct PermuteCase {
  int tokens, top_k, experts;
  int32_t live;  // tokens at or past it route nowhere (−1: no live count passed)
  int ranks;     // > 1: ids map to rank 1's experts (every ranks-th), as tensor parallelism's
};

// Shapes on both sides of the one-launch limit (kMoePermuteOneLaunchPairs), ids with −1 and out
// of range, padding tokens, tensor parallelism's mapping.
TEST(CudaMoeTest, PermuteGroupsEveryPairByExpert) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 8);
  for (const PermuteCase& c : std::vector<PermuteCase>{{1, 1, 1, -1, 1},
                                                       {5, 2, 3, -1, 1},
                                                       {97, 8, 256, 90, 1},
                                                       {64, 8, 896, 1, 8},
                                                       {1000, 16, 896, 999, 3},
                                                       {2049, 8, 256, -1, 1},
                                                       {3001, 7, 67, 2500, 2},
                                                       {9, 4, 5000, -1, 1}}) {
    const int id_space = c.experts;
    std::vector<int32_t> local_of(static_cast<size_t>(id_space), -1);
    int local_experts = 0;
    for (int e = 0; e < id_space; ++e) {
      if (c.ranks == 1 || e % c.ranks == 1) local_of[static_cast<size_t>(e)] = local_experts++;
    }
    std::uniform_int_distribution<int> pick(-2, id_space + 1);  // a few −2, −1, E, E + 1
    std::vector<int32_t> ids(static_cast<size_t>(c.tokens) * c.top_k), expert(ids.size());
    for (size_t p = 0; p < ids.size(); ++p) {
      ids[p] = pick(rng);
      const bool live = c.live < 0 || static_cast<int32_t>(p / c.top_k) < c.live;
      const bool in_range = ids[p] >= 0 && ids[p] < id_space;
      expert[p] = live && in_range ? local_of[static_cast<size_t>(ids[p])] : -1;
    }
    DeviceArray<int32_t> d_ids(ids), d_offsets(local_experts + 1), d_token(ids.size()),
        d_pair_row(ids.size()), d_live(std::vector<int32_t>{c.live}), d_local(local_of);
    DeviceArray<unsigned char> d_ws(MoePermuteWorkspaceBytes(local_experts));
    d_offsets.Poison();
    d_token.Poison();
    d_pair_row.Poison();
    MoePermuteOptions options;
    if (c.live >= 0) options.live_tokens = d_live.get();
    if (c.ranks > 1) {
      options.local_of = d_local.get();
      options.id_space = id_space;
    }
    STRATA_ASSERT_OK(MoePermute(d_ids.get(), c.tokens, c.top_k, local_experts, d_ws.get(),
                                static_cast<int64_t>(d_ws.size()), d_offsets.get(), d_token.get(),
                                d_pair_row.get(), nullptr, options));
    EXPECT_EQ(d_ids.Download(), ids) << "the ids are read, never written";
    testing::CheckMoePermutation(expert, c.top_k, local_experts, d_offsets.Download(),
                                 d_token.Download(), d_pair_row.Download(),
                                 absl::StrCat("T", c.tokens, " k", c.top_k, " E", c.experts,
                                              " live ", c.live, " ranks ", c.ranks));
  }
  EXPECT_FALSE(MoePermute(nullptr, -1, 1, 4, nullptr, 0, nullptr, nullptr, nullptr, nullptr).ok());
  MoePermuteOptions no_space;
  no_space.local_of = reinterpret_cast<const int32_t*>(16);
  EXPECT_FALSE(
      MoePermute(nullptr, 1, 1, 4, nullptr, 0, nullptr, nullptr, nullptr, nullptr, no_space).ok());
}

// Routed SiTU-GLU experts end to end: permute → gather → grouped gate|up GEMM → GLU (bf16) →
// grouped down GEMM → weighted combine, vs the per-token reference.
void RunExperts(GroupedGemmMode mode, int tokens, int top_k, int experts, int dim, int inter,
                std::mt19937& rng) {
  absl::StatusOr<CublasHandle> handle = CublasHandle::Create();
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::vector<float> x = Uniform(rng, static_cast<size_t>(tokens) * dim, -1, 1);
  std::vector<float> w_gu =
      Uniform(rng, static_cast<size_t>(experts) * 2 * inter * dim, -0.1f, 0.1f);
  std::vector<float> w_down = Uniform(rng, static_cast<size_t>(experts) * dim * inter, -0.1f, 0.1f);
  const std::vector<uint16_t> x_bits = ToBf16InPlace(x), gu_bits = ToBf16InPlace(w_gu),
                              down_bits = ToBf16InPlace(w_down);
  std::uniform_int_distribution<int> pick(0, experts - 1);
  std::vector<int32_t> ids(static_cast<size_t>(tokens) * top_k);
  for (int t = 0; t < tokens; ++t) {  // distinct experts per token, as a router gives
    std::vector<int32_t> chosen;
    while (static_cast<int>(chosen.size()) < top_k) {
      const int e = pick(rng);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    std::copy(chosen.begin(), chosen.end(), ids.begin() + static_cast<int64_t>(t) * top_k);
  }
  const std::vector<float> weights = Uniform(rng, ids.size(), 0.1f, 1.0f);
  const GluParams glu{GluKind::kSitu, 4.0f, 25.0f};

  std::vector<float> expected(static_cast<size_t>(tokens) * dim, 0.0f);
  std::vector<float> gu(2 * inter), h(inter), y(dim);
  for (int t = 0; t < tokens; ++t) {
    for (int s = 0; s < top_k; ++s) {
      const int e = ids[t * top_k + s];
      MatmulBf16Reference(x.data() + static_cast<int64_t>(t) * dim, 1, dim,
                          gu_bits.data() + static_cast<int64_t>(e) * 2 * inter * dim, 2 * inter,
                          gu.data());
      GluReference(gu.data(), gu.data() + inter, inter, glu, h.data());
      MatmulBf16Reference(h.data(), 1, inter,
                          down_bits.data() + static_cast<int64_t>(e) * dim * inter, dim, y.data());
      for (int c = 0; c < dim; ++c) expected[t * dim + c] += weights[t * top_k + s] * y[c];
    }
  }

  const int64_t rows = static_cast<int64_t>(tokens) * top_k;
  DeviceArray<uint16_t> d_x(x_bits), d_gu(gu_bits), d_down(down_bits);
  DeviceArray<int32_t> d_ids(ids), d_offsets(experts + 1), d_token(rows), d_pair_row(rows);
  DeviceArray<float> d_weights(weights), d_gu_out(rows * 2 * inter), d_y(rows * dim),
      d_out(static_cast<size_t>(tokens) * dim);
  DeviceArray<uint16_t> d_x_perm(rows * dim), d_h(rows * inter);
  DeviceArray<unsigned char> d_perm_ws(MoePermuteWorkspaceBytes(experts)),
      d_gemm_ws(MoeGroupedGemmWorkspaceBytes(experts));
  d_out.Poison();
  d_y.Poison();
  STRATA_ASSERT_OK(MoePermute(d_ids.get(), tokens, top_k, experts, d_perm_ws.get(),
                              static_cast<int64_t>(d_perm_ws.size()), d_offsets.get(),
                              d_token.get(), d_pair_row.get(), nullptr));
  STRATA_ASSERT_OK(MoeGatherRows(d_x.get(), d_token.get(), rows, dim, d_x_perm.get(), nullptr));
  const std::vector<int32_t> offsets = d_offsets.Download();
  GroupedGemmMode used = mode;
  STRATA_ASSERT_OK(MoeGroupedGemm(handle->get(), d_x_perm.get(), offsets.data(), experts,
                                  d_gu.get(), 2 * inter, dim, d_gu_out.get(), mode, d_gemm_ws.get(),
                                  static_cast<int64_t>(d_gemm_ws.size()), &used, nullptr));
  STRATA_ASSERT_OK(
      Glu(d_gu_out.get(), d_gu_out.get() + inter, rows, inter, 2 * inter, glu, d_h.get(), nullptr));
  STRATA_ASSERT_OK(MoeGroupedGemm(handle->get(), d_h.get(), offsets.data(), experts, d_down.get(),
                                  dim, inter, d_y.get(), mode, d_gemm_ws.get(),
                                  static_cast<int64_t>(d_gemm_ws.size()), &used, nullptr));
  STRATA_ASSERT_OK(MoeCombine(d_y.get(), d_pair_row.get(), d_weights.get(), tokens, top_k, dim,
                              d_out.get(), nullptr));
  const std::string name =
      absl::StrCat(used == GroupedGemmMode::kGroupedBatched ? "grouped" : "loop", "_T", tokens,
                   "_k", top_k, "_E", experts, "_d", dim, "_i", inter);
  // The hidden activation h is rounded to bf16 before the down projection.
  const std::vector<float> combined = d_out.Download();
  STRATA_EXPECT_RELERR("MoeExperts", name, combined, expected, 1e-2);

  // accumulate: out already holds the shared expert's rows; the sum is added to them, bit for
  // bit what a combine and then an add give.
  const std::vector<float> shared = Uniform(rng, combined.size(), -1, 1);
  DeviceArray<float> d_acc(shared);
  STRATA_ASSERT_OK(MoeCombine(d_y.get(), d_pair_row.get(), d_weights.get(), tokens, top_k, dim,
                              d_acc.get(), nullptr, /*accumulate=*/true));
  const std::vector<float> accumulated = d_acc.Download();
  for (size_t i = 0; i < combined.size(); ++i) {
    ASSERT_EQ(accumulated[i], combined[i] + shared[i]) << name << " value " << i;
  }
}

TEST(CudaMoeTest, GroupedExpertsMatchReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 9);
  for (GroupedGemmMode mode : {GroupedGemmMode::kAuto, GroupedGemmMode::kPerExpertLoop}) {
    RunExperts(mode, 1, 1, 1, 64, 32, rng);
    RunExperts(mode, 13, 3, 7, 136, 72, rng);  // some experts empty
    RunExperts(mode, 64, 8, 32, 256, 96, rng);
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
