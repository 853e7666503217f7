// RmsNorm / AddRmsNorm / AttnResMix / Glu on the GPU vs kernels/reference.
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "kernels/cuda/moe.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/testing.h"
#include "kernels/reference/attn_res.h"
#include "kernels/reference/glu.h"
#include "kernels/reference/rms_norm.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::FromBf16;
using testing::TestSeed;
using testing::Uniform;

std::string Shape(int64_t rows, int64_t dim) { return absl::StrCat(rows, "x", dim); }

TEST(CudaNormTest, RmsNormAndAddRmsNormMatchReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 3);
  for (auto [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 31}, {7, 257}, {5, 2304}, {2, 7168}, {33, 1000}}) {
    const std::vector<float> x = Uniform(rng, rows * dim, -3, 3);
    const std::vector<float> residual = Uniform(rng, rows * dim, -3, 3);
    const std::vector<float> w = Uniform(rng, dim, 0.5f, 1.5f);
    std::vector<float> expected(rows * dim);
    RmsNormReference(x.data(), rows, dim, w.data(), 1e-5f, expected.data());
    DeviceArray<float> d_x(x), d_w(w), d_y(rows * dim);
    DeviceArray<uint16_t> d_y16(rows * dim);
    d_y.Poison();
    d_y16.Poison();
    STRATA_ASSERT_OK(RmsNorm(d_x.get(), rows, dim, d_w.get(), 1e-5f, d_y.get(), nullptr));
    STRATA_ASSERT_OK(RmsNorm(d_x.get(), rows, dim, d_w.get(), 1e-5f, d_y16.get(), nullptr));
    STRATA_EXPECT_RELERR("RmsNorm_f32", Shape(rows, dim), d_y.Download(), expected, 3e-6);
    STRATA_EXPECT_RELERR("RmsNorm_bf16", Shape(rows, dim), FromBf16(d_y16.Download()), expected,
                         4e-3);
    // Without weight.
    RmsNormReference(x.data(), rows, dim, nullptr, 1e-6f, expected.data());
    d_y.Poison();
    STRATA_ASSERT_OK(RmsNorm(d_x.get(), rows, dim, nullptr, 1e-6f, d_y.get(), nullptr));
    STRATA_EXPECT_RELERR("RmsNorm_noweight", Shape(rows, dim), d_y.Download(), expected, 3e-6);

    // AddRmsNorm: residual ← residual + x (exact f32 adds), y = RmsNorm(residual).
    std::vector<float> sum(rows * dim);
    for (int64_t i = 0; i < rows * dim; ++i) sum[i] = residual[i] + x[i];
    RmsNormReference(sum.data(), rows, dim, w.data(), 1e-5f, expected.data());
    DeviceArray<float> d_res(residual);
    d_y.Poison();
    STRATA_ASSERT_OK(
        AddRmsNorm(d_res.get(), d_x.get(), rows, dim, d_w.get(), 1e-5f, d_y.get(), nullptr));
    EXPECT_EQ(d_res.Download(), sum) << Shape(rows, dim);
    STRATA_EXPECT_RELERR("AddRmsNorm_f32", Shape(rows, dim), d_y.Download(), expected, 3e-6);
  }
}

// The routed experts' rows of a combine: y_perm [rows·top_k, dim], weights, and pair_row with
// some pairs dropped (−1) and the rest permuted.
struct RoutedRows {
  std::vector<float> y, weights;
  std::vector<int32_t> pair_row;
};
RoutedRows MakeRoutedRows(std::mt19937& rng, int64_t rows, int64_t dim, int top_k) {
  const int64_t pairs = rows * top_k;
  RoutedRows r;
  r.y = Uniform(rng, static_cast<size_t>(pairs * dim), -2, 2);
  r.weights = Uniform(rng, static_cast<size_t>(pairs), 0.0f, 1.0f);
  r.pair_row.resize(static_cast<size_t>(pairs));
  for (int64_t q = 0; q < pairs; ++q) r.pair_row[q] = q % 5 == 3 ? -1 : (q * 7) % pairs;
  return r;
}

// The MoE combine folded into the residual add gives bit for bit MoeCombine (onto the shared
// expert's rows, or alone) followed by AddRmsNorm: the residual and the normed rows.
TEST(CudaNormTest, AddRmsNormFoldsTheMoeCombine) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 7);
  for (bool shared : {true, false}) {
    for (auto [rows, dim, top_k] :
         std::vector<std::tuple<int64_t, int64_t, int>>{{1, 5, 1}, {3, 257, 2}, {7, 1024, 8}}) {
      const RoutedRows r = MakeRoutedRows(rng, rows, dim, top_k);
      const std::vector<float>&y = r.y, &weights = r.weights;
      const std::vector<int32_t>& pair_row = r.pair_row;
      const std::vector<float> x = Uniform(rng, static_cast<size_t>(rows * dim), -2, 2);
      const std::vector<float> h = Uniform(rng, static_cast<size_t>(rows * dim), -2, 2);
      const std::vector<float> w = Uniform(rng, static_cast<size_t>(dim), 0.5f, 1.5f);
      DeviceArray<float> d_y(y), d_weights(weights), d_x(x), d_w(w), d_h_split(h), d_h_fused(h);
      DeviceArray<int32_t> d_rows(pair_row);
      DeviceArray<uint16_t> normed_split(rows * dim), normed_fused(rows * dim);
      STRATA_ASSERT_OK(MoeCombine(d_y.get(), d_rows.get(), d_weights.get(), rows, top_k, dim,
                                  d_x.get(), nullptr, /*accumulate=*/shared));
      STRATA_ASSERT_OK(AddRmsNorm(d_h_split.get(), d_x.get(), rows, dim, d_w.get(), 1e-5f,
                                  normed_split.get(), nullptr));
      const DeviceArray<float> d_shared(x);
      const RoutedSum routed{d_y.get(), d_rows.get(), d_weights.get(), top_k};
      STRATA_ASSERT_OK(AddRmsNorm(d_h_fused.get(), shared ? d_shared.get() : nullptr, routed, rows,
                                  dim, d_w.get(), 1e-5f, normed_fused.get(), nullptr));
      const std::string name = absl::StrCat(shared ? "shared_" : "alone_", Shape(rows, dim));
      EXPECT_EQ(d_h_fused.Download(), d_h_split.Download()) << name;
      EXPECT_EQ(normed_fused.Download(), normed_split.Download()) << name;
    }
  }
  EXPECT_FALSE(
      AddRmsNorm(nullptr, nullptr, RoutedSum{}, 1, 4, nullptr, 1e-5f, nullptr, nullptr).ok());
}

// LatentMoE's latent_norm over the routed sum: RmsNorm(RoutedSum) gives MoeCombine + RmsNorm's
// bits, with and without a weight.
TEST(CudaNormTest, RmsNormFoldsTheMoeCombine) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 8);
  for (bool weighted : {true, false}) {
    for (auto [rows, dim, top_k] :
         std::vector<std::tuple<int64_t, int64_t, int>>{{1, 5, 1}, {3, 257, 2}, {6, 1024, 8}}) {
      const RoutedRows r = MakeRoutedRows(rng, rows, dim, top_k);
      const std::vector<float>&y = r.y, &weights = r.weights;
      const std::vector<int32_t>& pair_row = r.pair_row;
      const std::vector<float> w = Uniform(rng, static_cast<size_t>(dim), 0.5f, 1.5f);
      DeviceArray<float> d_y(y), d_weights(weights), d_w(w), d_sum(rows * dim);
      DeviceArray<int32_t> d_rows(pair_row);
      DeviceArray<uint16_t> normed_split(rows * dim), normed_fused(rows * dim);
      normed_fused.Poison();
      const float* weight = weighted ? d_w.get() : nullptr;
      STRATA_ASSERT_OK(MoeCombine(d_y.get(), d_rows.get(), d_weights.get(), rows, top_k, dim,
                                  d_sum.get(), nullptr));
      STRATA_ASSERT_OK(RmsNorm(d_sum.get(), rows, dim, weight, 1e-6f, normed_split.get(), nullptr));
      const RoutedSum routed{d_y.get(), d_rows.get(), d_weights.get(), top_k};
      STRATA_ASSERT_OK(RmsNorm(routed, rows, dim, weight, 1e-6f, normed_fused.get(), nullptr));
      EXPECT_EQ(normed_fused.Download(), normed_split.Download())
          << (weighted ? "weighted_" : "plain_") << Shape(rows, dim);
    }
  }
  EXPECT_FALSE(RmsNorm(RoutedSum{}, 1, 4, nullptr, 1e-6f, nullptr, nullptr).ok());
}

TEST(CudaNormTest, AttnResMixMatchesReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 4);
  for (int num_sources : {1, 2, 9, 16}) {
    for (auto [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{{1, 5}, {3, 257}, {4, 7168}}) {
      std::vector<std::vector<float>> host;
      std::vector<const float*> host_ptrs;
      for (int i = 0; i < num_sources; ++i) {
        host.push_back(Uniform(rng, rows * dim, -2, 2));
      }
      for (const auto& h : host) host_ptrs.push_back(h.data());
      const std::vector<float> w_norm = Uniform(rng, dim, 0.5f, 1.5f);
      const std::vector<float> w_proj = Uniform(rng, dim, -0.2f, 0.2f);
      const std::vector<float> norm_w = Uniform(rng, dim, 0.5f, 1.5f);
      std::vector<float> expected(rows * dim), expected_normed(rows * dim);
      AttnResMixReference(host_ptrs.data(), num_sources, rows, dim, w_norm.data(), w_proj.data(),
                          1e-5f, expected.data());
      RmsNormReference(expected.data(), rows, dim, norm_w.data(), 1e-5f, expected_normed.data());

      std::vector<std::unique_ptr<DeviceArray<float>>> d_sources;
      AttnResSources sources;
      sources.count = num_sources;
      for (int i = 0; i < num_sources; ++i) {
        d_sources.push_back(std::make_unique<DeviceArray<float>>(host[i]));
        sources.ptr[i] = d_sources.back()->get();
      }
      DeviceArray<float> d_wn(w_norm), d_wp(w_proj), d_nw(norm_w), d_out(rows * dim);
      DeviceArray<uint16_t> d_normed(rows * dim);
      d_out.Poison();
      d_normed.Poison();
      STRATA_ASSERT_OK(AttnResMix(sources, rows, dim, d_wn.get(), d_wp.get(), 1e-5f, d_out.get(),
                                  d_nw.get(), 1e-5f, d_normed.get(), nullptr));
      const std::string name = absl::StrCat(num_sources, "src_", Shape(rows, dim));
      STRATA_EXPECT_RELERR("AttnResMix", name, d_out.Download(), expected, 5e-5);
      STRATA_EXPECT_RELERR("AttnResMix_normed_bf16", name, FromBf16(d_normed.Download()),
                           expected_normed, 4e-3);
    }
  }
}

// The partial sum's pending update folded into the mix (p = p + pending, or p = pending) gives
// bit for bit what the add and then the mix give, and leaves the updated p behind.
TEST(CudaNormTest, AttnResMixAppliesThePendingUpdateOfThePartialSum) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 6);
  for (bool replace : {false, true}) {
    for (int num_sources : {1, 3, 16}) {
      for (auto [rows, dim] :
           std::vector<std::pair<int64_t, int64_t>>{{1, 5}, {3, 257}, {2, 2304}}) {
        const std::string name =
            absl::StrCat(replace ? "replace_" : "add_", num_sources, "src_", Shape(rows, dim));
        std::vector<std::unique_ptr<DeviceArray<float>>> fused_src, split_src;
        AttnResSources fused, split;
        fused.count = split.count = num_sources;
        const std::vector<float> pending = Uniform(rng, rows * dim, -2, 2);
        std::vector<float> updated;
        for (int i = 0; i < num_sources; ++i) {
          const std::vector<float> v = Uniform(rng, rows * dim, -2, 2);
          std::vector<float> v_split = v;
          if (i == num_sources - 1) {  // the partial sum: the split path updates it first
            for (size_t j = 0; j < v.size(); ++j)
              v_split[j] = replace ? pending[j] : v[j] + pending[j];
            updated = v_split;
          }
          fused_src.push_back(std::make_unique<DeviceArray<float>>(v));
          split_src.push_back(std::make_unique<DeviceArray<float>>(v_split));
          fused.ptr[i] = fused_src.back()->get();
          split.ptr[i] = split_src.back()->get();
        }
        if (replace) fused_src.back()->Poison();  // replaced: never read
        DeviceArray<float> d_pending(pending);
        fused.partial = fused_src.back()->get();
        fused.pending = d_pending.get();
        fused.replace = replace;
        const std::vector<float> w_norm = Uniform(rng, dim, 0.5f, 1.5f);
        const std::vector<float> w_proj = Uniform(rng, dim, -0.2f, 0.2f);
        const std::vector<float> norm_w = Uniform(rng, dim, 0.5f, 1.5f);
        DeviceArray<float> d_wn(w_norm), d_wp(w_proj), d_nw(norm_w), out_f(rows * dim),
            out_s(rows * dim);
        DeviceArray<uint16_t> normed_f(rows * dim), normed_s(rows * dim);
        STRATA_ASSERT_OK(AttnResMix(fused, rows, dim, d_wn.get(), d_wp.get(), 1e-5f, out_f.get(),
                                    d_nw.get(), 1e-5f, normed_f.get(), nullptr));
        STRATA_ASSERT_OK(AttnResMix(split, rows, dim, d_wn.get(), d_wp.get(), 1e-5f, out_s.get(),
                                    d_nw.get(), 1e-5f, normed_s.get(), nullptr));
        EXPECT_EQ(fused_src.back()->Download(), updated) << name;
        EXPECT_EQ(out_f.Download(), out_s.Download()) << name;
        EXPECT_EQ(normed_f.Download(), normed_s.Download()) << name;
      }
    }
  }
  AttnResSources wrong;
  wrong.count = 2;
  wrong.ptr[0] = wrong.ptr[1] = reinterpret_cast<const float*>(16);
  wrong.partial = reinterpret_cast<float*>(32);  // not the last source
  wrong.pending = reinterpret_cast<const float*>(48);
  EXPECT_FALSE(
      AttnResMix(wrong, 1, 4, nullptr, nullptr, 1e-5f, nullptr, nullptr, 1e-5f, nullptr, nullptr)
          .ok());
}

TEST(CudaNormTest, GluMatchesReferenceWithRowStrides) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 5);
  const std::vector<GluParams> variants = {
      {GluKind::kSwiGlu, 4.0f, 0.0f}, {GluKind::kSitu, 4.0f, 25.0f}, {GluKind::kSitu, 4.0f, 0.0f}};
  for (const GluParams& params : variants) {
    for (auto [rows, width] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 37}, {17, 1024}, {5, 3072}}) {
      // Fused [rows, 2·width] gate|up buffer, wide values so SiTU's caps matter.
      const std::vector<float> fused = Uniform(rng, rows * 2 * width, -40, 40);
      std::vector<float> gate(rows * width), up(rows * width), expected(rows * width);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < width; ++c) {
          gate[r * width + c] = fused[r * 2 * width + c];
          up[r * width + c] = fused[r * 2 * width + width + c];
        }
      }
      GluReference(gate.data(), up.data(), rows * width, params, expected.data());
      DeviceArray<float> d_fused(fused), d_out(rows * width);
      DeviceArray<uint16_t> d_out16(rows * width);
      d_out.Poison();
      d_out16.Poison();
      STRATA_ASSERT_OK(Glu(d_fused.get(), d_fused.get() + width, rows, width, 2 * width, params,
                           d_out.get(), nullptr));
      STRATA_ASSERT_OK(Glu(d_fused.get(), d_fused.get() + width, rows, width, 2 * width, params,
                           d_out16.get(), nullptr));
      const std::string name =
          absl::StrCat(params.kind == GluKind::kSwiGlu ? "swiglu" : "situ", "_b2_",
                       static_cast<int>(params.beta2), "_", Shape(rows, width));
      STRATA_EXPECT_RELERR("Glu_f32", name, d_out.Download(), expected, 1e-5);
      STRATA_EXPECT_RELERR("Glu_bf16", name, FromBf16(d_out16.Download()), expected, 4e-3);
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
