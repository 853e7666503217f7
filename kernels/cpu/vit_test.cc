// The vision tower's fast kernels against kernels/reference/vit.h on odd shapes, on every ISA
// the CPU runs (the attention on the MLA lane tiles; under STRATA_ISA=scalar through the matmul
// kernels).
#include "kernels/cpu/vit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/internal/isa_testing.h"
#include "kernels/cpu/internal/random_testing.h"
#include "kernels/reference/vit.h"

namespace strata::kernels::cpu {
namespace {

using internal::IsaCap;
using internal::SupportedIsas;

using internal::Normal;

// |y − ref| ≤ tol · (1 + |ref|) everywhere: f32 sums over ≤ a few thousand terms.
::testing::AssertionResult Close(const std::vector<float>& y, const std::vector<float>& ref,
                                 double tol, const std::string& what) {
  if (y.size() != ref.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  for (size_t i = 0; i < y.size(); ++i) {
    if (!(std::fabs(double{y[i]} - ref[i]) <= tol * (1 + std::fabs(ref[i])))) {
      return ::testing::AssertionFailure()
             << what << ": [" << i << "] = " << y[i] << ", reference " << ref[i];
    }
  }
  return ::testing::AssertionSuccess();
}

struct Grid {
  int h, w;
};
// 1×1 (a single patch), non-square, prime sides, and a grid past one 128-row query tile.
const Grid kGrids[] = {{1, 1}, {2, 2}, {3, 5}, {7, 2}, {13, 11}, {12, 20}};

TEST(CpuVitTest, AttentionMatchesReferenceOnOddShapesOnEveryIsa) {
  std::vector<Isa> isas = SupportedIsas();
  isas.insert(isas.begin(), Isa::kScalar);  // the matmul path
  for (Isa isa : isas) {
    IsaCap cap(isa);
    std::mt19937 rng(3);
    for (const Grid g : kGrids) {
      for (const auto& [heads, head_dim] : {std::pair{1, 4}, std::pair{3, 16}, std::pair{2, 36}}) {
        const int64_t n = int64_t{g.h} * g.w, width = int64_t{heads} * head_dim;
        const int64_t stride = 3 * width + 5;  // q, k, v side by side with padding, as wqkv
        const std::vector<float> qkv = Normal(rng, n * stride, 2.0f);
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        std::vector<float> out(static_cast<size_t>(n * width)), ref(out.size());
        VitAttention(qkv.data(), qkv.data() + width, qkv.data() + 2 * width, stride, n, heads,
                     head_dim, scale, out.data());
        reference::VitAttention(qkv.data(), qkv.data() + width, qkv.data() + 2 * width, stride, n,
                                heads, head_dim, scale, ref.data());
        EXPECT_TRUE(Close(out, ref, 2e-5,
                          "attention " + std::to_string(g.h) + "x" + std::to_string(g.w) + " " +
                              std::to_string(heads) + "x" + std::to_string(head_dim)));
      }
    }
  }
}

TEST(CpuVitTest, Rope2dMatchesReferenceAndRotatesColumnsThenRows) {
  std::mt19937 rng(4);
  for (const Grid g : kGrids) {
    const int heads = 3, head_dim = 16;
    const int64_t stride = heads * head_dim + 3, n = int64_t{g.h} * g.w;
    std::vector<float> x = Normal(rng, n * stride), ref = x;
    Rope2d(MakeRope2dTable(g.h, g.w, head_dim, 10000.0f), x.data(), stride, heads);
    reference::Rope2d(ref.data(), stride, g.h, g.w, heads, head_dim, 10000.0f);
    EXPECT_TRUE(Close(x, ref, 1e-6, "rope " + std::to_string(g.h) + "x" + std::to_string(g.w)));
  }
  // Dims (0, 1) turn with the column, (2, 3) with the row: a patch in row 0, column 1 moves
  // dims 0–1 by angle 1 (f_0 = 1) and leaves 2–3; one in row 1, column 0 the other way round.
  // Rows (0,0) (0,1) (1,0) (1,1) of a 2×2 grid, one head of 4 dims each.
  std::vector<float> x = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
  reference::Rope2d(x.data(), 4, 2, 2, 1, 4, 10000.0f);
  EXPECT_NEAR(x[4], std::cos(1.0f), 1e-6);
  EXPECT_NEAR(x[5], std::sin(1.0f), 1e-6);
  EXPECT_NEAR(x[6], 1.0f, 1e-6);
  EXPECT_NEAR(x[8], 1.0f, 1e-6);
  EXPECT_NEAR(x[10], std::cos(1.0f), 1e-6);
  EXPECT_NEAR(x[11], std::sin(1.0f), 1e-6);
}

TEST(CpuVitTest, BilinearPositionsMatchReferenceAndAreIdentityAtTheTableSize) {
  std::mt19937 rng(5);
  const int in_h = 5, in_w = 4, d = 7;
  const std::vector<float> table = Normal(rng, int64_t{in_h} * in_w * d);
  for (const Grid g : kGrids) {
    std::vector<float> x = Normal(rng, int64_t{g.h} * g.w * d), ref = x;
    AddBilinearPositions(table.data(), in_h, in_w, d, g.h, g.w, x.data());
    reference::AddBilinearPositions(table.data(), in_h, in_w, d, g.h, g.w, ref.data());
    EXPECT_TRUE(Close(x, ref, 1e-6, "bilinear " + std::to_string(g.h) + "x" + std::to_string(g.w)));
  }
  std::vector<float> zero(table.size(), 0.0f);
  AddBilinearPositions(table.data(), in_h, in_w, d, in_h, in_w, zero.data());
  EXPECT_EQ(zero, table);
}

TEST(CpuVitTest, GeluMatchesReference) {
  std::mt19937 rng(6);
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{40000}}) {
    std::vector<float> x = Normal(rng, n, 3.0f), ref = x, y = x, ref_erf = x;
    GeluTanh(x.data(), n);
    reference::GeluTanh(ref.data(), n);
    EXPECT_TRUE(Close(x, ref, 1e-6, "gelu tanh"));
    GeluErf(y.data(), n);
    reference::GeluErf(ref_erf.data(), n);
    EXPECT_TRUE(Close(y, ref_erf, 1e-6, "gelu erf"));
  }
}

}  // namespace
}  // namespace strata::kernels::cpu
