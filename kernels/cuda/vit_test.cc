// The vision tower's kernels on the GPU vs kernels/reference/vit.h, over odd grids (1×1, 1×n,
// non-square), odd widths and head sizes up to kVitMaxHeadDim.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/testing.h"
#include "kernels/cuda/vit.h"
#include "kernels/reference/vit.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::TestSeed;
using testing::Uniform;

TEST(CudaVitTest, BilinearPositionsMatchReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 11);
  // (table h, w, d, grid h, w): up- and down-sampling, 1×1 both ways, odd sides.
  for (auto [ih, iw, d, oh, ow] :
       std::vector<std::tuple<int, int, int, int, int>>{{4, 4, 8, 4, 4},
                                                        {3, 5, 7, 1, 1},
                                                        {1, 1, 3, 5, 2},
                                                        {8, 6, 33, 13, 3},
                                                        {5, 5, 16, 2, 8}}) {
    const std::vector<float> table = Uniform(rng, size_t(ih) * iw * d, -1, 1);
    std::vector<float> x = Uniform(rng, size_t(oh) * ow * d, -1, 1);
    DeviceArray<float> d_table(table), d_x(x);
    reference::AddBilinearPositions(table.data(), ih, iw, d, oh, ow, x.data());
    STRATA_ASSERT_OK(VitAddBilinearPositions(d_table.get(), ih, iw, d, oh, ow, d_x.get(), nullptr));
    STRATA_EXPECT_RELERR("VitAddBilinearPositions", absl::StrCat(ih, "x", iw, "->", oh, "x", ow),
                         d_x.Download(), x, 1e-6);
  }
}

TEST(CudaVitTest, Rope2dMatchesReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 12);
  for (auto [gh, gw, heads, head_dim, extra] : std::vector<std::tuple<int, int, int, int, int>>{
           {1, 1, 1, 4, 0}, {3, 7, 2, 8, 5}, {16, 2, 3, 72, 0}, {5, 9, 1, 128, 3}}) {
    const int64_t stride = int64_t{heads} * head_dim + extra;  // rows wider than the heads
    std::vector<float> x = Uniform(rng, size_t(gh) * gw * stride, -2, 2);
    DeviceArray<float> d_x(x);
    reference::Rope2d(x.data(), stride, gh, gw, heads, head_dim, 10000.0f);
    STRATA_ASSERT_OK(VitRope2d(d_x.get(), stride, gh, gw, heads, head_dim, 10000.0f, nullptr));
    STRATA_EXPECT_RELERR("VitRope2d", absl::StrCat(gh, "x", gw, " h", heads, " d", head_dim),
                         d_x.Download(), x, 1e-6);
  }
}

TEST(CudaVitTest, AttentionMatchesReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 13);
  // (rows, heads, head_dim): one row, fewer rows than a tile, several query and key tiles with
  // ragged ends, K3's head size (72), the widest head.
  for (auto [n, heads, head_dim] : std::vector<std::tuple<int64_t, int, int>>{
           {1, 1, 8}, {5, 2, 16}, {33, 3, 12}, {97, 2, 72}, {130, 1, 128}}) {
    const int64_t width = int64_t{heads} * head_dim, stride = 3 * width;  // q | k | v rows
    const std::vector<float> qkv = Uniform(rng, size_t(n * stride), -1.5f, 1.5f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    std::vector<float> expected(size_t(n * width));
    reference::VitAttention(qkv.data(), qkv.data() + width, qkv.data() + 2 * width, stride, n,
                            heads, head_dim, scale, expected.data());
    DeviceArray<float> d_qkv(qkv), d_out(size_t(n * width));
    d_out.Poison();
    STRATA_ASSERT_OK(VitAttention(d_qkv.get(), d_qkv.get() + width, d_qkv.get() + 2 * width, stride,
                                  n, heads, head_dim, scale, d_out.get(), nullptr));
    STRATA_EXPECT_RELERR("VitAttention", absl::StrCat(n, " rows h", heads, " d", head_dim),
                         d_out.Download(), expected, 2e-6);
  }
  DeviceArray<float> any(16);
  EXPECT_FALSE(
      VitAttention(any.get(), any.get(), any.get(), 129, 1, 1, 129, 1.0f, any.get(), nullptr).ok())
      << "a head wider than kVitMaxHeadDim";
}

TEST(CudaVitTest, MergeAndGelusMatchReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 14);
  for (auto [gh, gw, d] :
       std::vector<std::tuple<int, int, int>>{{2, 2, 1}, {2, 6, 5}, {8, 4, 33}}) {
    const std::vector<float> x = Uniform(rng, size_t(gh) * gw * d, -1, 1);
    std::vector<float> expected(x.size());
    reference::MergePatches2x2(x.data(), gh, gw, d, expected.data());
    DeviceArray<float> d_x(x), d_merged(x.size());
    d_merged.Poison();
    STRATA_ASSERT_OK(VitMergePatches2x2(d_x.get(), gh, gw, d, d_merged.get(), nullptr));
    EXPECT_EQ(d_merged.Download(), expected) << gh << "x" << gw << " d" << d;  // a gather
  }
  EXPECT_FALSE(VitMergePatches2x2(nullptr, 3, 2, 4, nullptr, nullptr).ok()) << "odd side";
  // Each value to f32 precision, far-negative ones too (1 + tanh and 1 + erf cancel there):
  // single values of the tails, then random vectors.
  for (float v : {-6.0f, -3.0f, 0.5f, 7.0f}) {  // (the f64 reference cancels too past ~-8)
    std::vector<float> tanh_form = {v}, erf_form = {v};
    reference::GeluTanh(tanh_form.data(), 1);
    reference::GeluErf(erf_form.data(), 1);
    DeviceArray<float> d_tanh(std::vector<float>{v}), d_erf(std::vector<float>{v});
    STRATA_ASSERT_OK(GeluTanh(d_tanh.get(), 1, nullptr));
    STRATA_ASSERT_OK(GeluErf(d_erf.get(), 1, nullptr));
    STRATA_EXPECT_RELERR("GeluTanh", absl::StrCat("x=", v), d_tanh.Download(), tanh_form, 1e-5);
    STRATA_EXPECT_RELERR("GeluErf", absl::StrCat("x=", v), d_erf.Download(), erf_form, 1e-5);
  }
  for (int64_t n : {1000, 4099}) {
    const std::vector<float> x = Uniform(rng, size_t(n), -6, 6);
    std::vector<float> tanh_form = x, erf_form = x;
    reference::GeluTanh(tanh_form.data(), n);
    reference::GeluErf(erf_form.data(), n);
    DeviceArray<float> d_tanh(x), d_erf(x);
    STRATA_ASSERT_OK(GeluTanh(d_tanh.get(), n, nullptr));
    STRATA_ASSERT_OK(GeluErf(d_erf.get(), n, nullptr));
    STRATA_EXPECT_RELERR("GeluTanh", absl::StrCat(n), d_tanh.Download(), tanh_form, 1e-6);
    STRATA_EXPECT_RELERR("GeluErf", absl::StrCat(n), d_erf.Download(), erf_form, 1e-6);
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
