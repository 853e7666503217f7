// MatmulPrecision::kInt8's products (matmul_vnni.cc): x rounded to int8 per 32-element block,
// checked against kernels/reference/matmul_q8.h and against the exact products within the
// rounding's own bound; where Matmul, MatmulProducts and the grouped expert products run them.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_glu.h"
#include "kernels/cpu/matmul_scatter_add.h"
#include "kernels/cpu/matmul_test_util.h"
#include "kernels/reference/matmul.h"
#include "kernels/reference/matmul_q8.h"

namespace strata::kernels::cpu {
namespace {

using testing::Abs;
using testing::MakeWeights;
using testing::Rng;
using testing::TestWeights;

bool Int8ProductsHere() { return MatmulAlgoSupported(MatmulAlgo::kInt8Vnni, WeightFormat::kMxfp4); }

std::string What(WeightFormat format, int64_t m, int64_t n, int64_t k) {
  return std::string(WeightFormatName(format)) + " m=" + std::to_string(m) +
         " n=" + std::to_string(n) + " k=" + std::to_string(k);
}

std::vector<float> Q8Reference(const TestWeights& w, const std::vector<float>& x, int64_t m) {
  const MatmulWeights& v = w.view;
  std::vector<float> y(static_cast<size_t>(m * v.n));
  if (v.format == WeightFormat::kMxfp4) {
    MatmulMxfp4Q8Reference(x.data(), m, v.k, w.packed.data(), w.scales.data(), v.n, y.data());
  } else {
    MatmulInt8Q8Reference(x.data(), m, v.k, reinterpret_cast<const int8_t*>(w.packed.data()),
                          w.int8_scales.data(), v.n, y.data());
  }
  return y;
}

// x as the int8 products see it: q · sx per element.
std::vector<float> Dequantized(const std::vector<float>& x, int64_t m, int64_t k) {
  std::vector<int8_t> codes(x.size());
  std::vector<float> scales(static_cast<size_t>(m * k / kQ8BlockSize)), out(x.size());
  for (int64_t i = 0; i < m; ++i) {
    QuantizeQ8Reference(x.data() + i * k, k, codes.data() + i * k,
                        scales.data() + i * k / kQ8BlockSize);
  }
  for (size_t e = 0; e < x.size(); ++e) out[e] = codes[e] * scales[e / kQ8BlockSize];
  return out;
}

// y against the Q8 reference (f32 accumulation: 1e-6·√k of Σ|x̂·w|, x̂ the rounded x), and
// against the exact product within the rounding's bound Σ_b sx_b/2 · Σ_{e∈b} |w_e| (plus the
// same f32 term): the first catches a wrong lane, scale or correction, the second a reference
// that drifted from what the exact products compute.
::testing::AssertionResult CloseToQ8Reference(const std::vector<float>& y, const TestWeights& w,
                                              const std::vector<float>& x, int64_t m) {
  const int64_t n = w.view.n, k = w.view.k;
  const std::vector<float> ref = Q8Reference(w, x, m), exact = testing::Reference(w, x, m);
  const std::vector<float> xq = Dequantized(x, m, k);
  std::vector<float> scale(static_cast<size_t>(m * n)), rounding(scale.size());
  MatmulReference(Abs(xq).data(), m, k, Abs(w.f32).data(), n, scale.data());
  // Σ_b sx_b/2 · Σ|w| = (x_half · |W|ᵀ) with x_half[e] = sx_b/2 = amax_b/254 (amax_b where the
  // block is too small to scale and codes zeros).
  std::vector<float> half(x.size());
  for (int64_t b = 0; b < m * k / kQ8BlockSize; ++b) {
    float amax = 0.0f;
    for (int e = 0; e < kQ8BlockSize; ++e) {
      amax = std::max(amax, std::fabs(x[b * kQ8BlockSize + e]));
    }
    const bool dropped = !(127.0f / amax <= std::numeric_limits<float>::max());
    for (int e = 0; e < kQ8BlockSize; ++e) {
      half[b * kQ8BlockSize + e] = dropped ? amax : amax / 254.0f;
    }
  }
  MatmulReference(half.data(), m, k, Abs(w.f32).data(), n, rounding.data());
  const double rel = 1e-6 * std::sqrt(static_cast<double>(k));
  for (int64_t e = 0; e < m * n; ++e) {
    const double err = std::fabs(static_cast<double>(y[e]) - ref[e]);
    if (!(err <= rel * scale[e])) {
      return ::testing::AssertionFailure()
             << "y[" << e / n << ", " << e % n << "] = " << y[e] << ", Q8 reference " << ref[e]
             << ", error " << err << " > bound " << rel * scale[e];
    }
    const double drift = std::fabs(static_cast<double>(ref[e]) - exact[e]);
    const double bound = 1.0001 * rounding[e] + rel * scale[e];
    if (!(drift <= bound)) {
      return ::testing::AssertionFailure() << "Q8 reference " << ref[e] << " vs exact " << exact[e]
                                           << ": " << drift << " > rounding bound " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

// k: one block, a partial last superblock of every size (1–3 MXFP4 blocks, one int8 group),
// whole superblocks, and two and three 1024-wide k blocks with ragged ends. n: 1, primes.
const int64_t kVnniShapesNK[][2] = {{1, 32},   {31, 64},   {33, 96},  {3, 160},  {7, 224},
                                    {97, 992}, {32, 1056}, {5, 2080}, {13, 1120}};
const int64_t kVnniRows[] = {1, 2, 3, 4, 5, 7, 13, 17};

TEST(CpuMatmulVnniTest, Int8ActivationsMatchTheQ8ReferenceOnOddShapes) {
  if (!Int8ProductsHere()) GTEST_SKIP() << "no AVX512_VNNI here";
  Rng rng(41);
  for (WeightFormat format : {WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    for (const auto& shape : kVnniShapesNK) {
      const int64_t n = shape[0], k = shape[1];
      const TestWeights w = MakeWeights(format, n, k, rng);
      for (int64_t m : kVnniRows) {
        std::vector<float> x = rng.Normal(m * k);
        if (m == 3) {  // blocks of very different sizes in one row, a block of zeros and one
                       // too small to scale (127 / amax overflows)
          for (int64_t e = 0; e < k; ++e) x[e] *= (e / 32) % 2 == 0 ? 1e-3f : 50.0f;
          for (int64_t e = 0; e < 32; ++e) x[k + e] = 0.0f;
          for (int64_t e = 0; e < 32; ++e) x[2 * k + e] *= 1e-38f;
        }
        std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
        MatmulWithAlgo(MatmulAlgo::kInt8Vnni, w.view, x.data(), m, y.data());
        EXPECT_TRUE(CloseToQ8Reference(y, w, x, m)) << What(format, m, n, k);
      }
    }
  }
}

// As the exact products: row i of a batch is the row alone, bit for bit (over two row chunks
// of the task loop and every tile height), and so is a result on 1 and 3 threads.
TEST(CpuMatmulVnniTest, RowOfBatchIsRowAloneAndThreadCountDoesNotMatter) {
  if (!Int8ProductsHere()) GTEST_SKIP() << "no AVX512_VNNI here";
  const int saved = omp_get_max_threads();
  Rng rng(42);
  for (WeightFormat format : {WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    const int64_t m = 67, n = 301, k = 2080;
    const TestWeights w = MakeWeights(format, n, k, rng);
    const std::vector<float> x = rng.Normal(m * k);
    std::vector<float> batch(static_cast<size_t>(m * n)), threads(batch.size());
    omp_set_num_threads(1);
    MatmulWithAlgo(MatmulAlgo::kInt8Vnni, w.view, x.data(), m, batch.data());
    omp_set_num_threads(3);
    MatmulWithAlgo(MatmulAlgo::kInt8Vnni, w.view, x.data(), m, threads.data());
    omp_set_num_threads(saved);
    EXPECT_EQ(batch, threads) << WeightFormatName(format);
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{6}, int64_t{63}, int64_t{64}, m - 1}) {
      std::vector<float> alone(static_cast<size_t>(n));
      MatmulWithAlgo(MatmulAlgo::kInt8Vnni, w.view, x.data() + i * k, 1, alone.data());
      EXPECT_EQ(alone, std::vector<float>(batch.begin() + i * n, batch.begin() + (i + 1) * n))
          << WeightFormatName(format) << " row " << i;
    }
  }
}

// A block holding an infinity or a NaN makes its row NaN (as the exact products would give a
// non-finite row); the other rows are untouched.
TEST(CpuMatmulVnniTest, NonFiniteActivationsMakeOnlyTheirRowNaN) {
  if (!Int8ProductsHere()) GTEST_SKIP() << "no AVX512_VNNI here";
  Rng rng(43);
  const int64_t m = 3, n = 9, k = 256;
  for (WeightFormat format : {WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    const TestWeights w = MakeWeights(format, n, k, rng);
    for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
      std::vector<float> x = rng.Normal(m * k);
      x[k + 200] = bad;  // row 1
      std::vector<float> y(static_cast<size_t>(m * n)), row(static_cast<size_t>(n));
      MatmulWithAlgo(MatmulAlgo::kInt8Vnni, w.view, x.data(), m, y.data());
      for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(y[n + j])) << j;
      for (int64_t i : {int64_t{0}, int64_t{2}}) {
        MatmulWithAlgo(MatmulAlgo::kInt8Vnni, w.view, x.data() + i * k, 1, row.data());
        EXPECT_EQ(row, std::vector<float>(y.begin() + i * n, y.begin() + (i + 1) * n));
      }
    }
  }
}

// Under kInt8, Matmul and MatmulProducts run the int8 products for MXFP4 and int8 weights below
// kBf16MinRows rows (and from there too on CPUs without the bf16 products), kBf16's products from
// kBf16MinRows rows where they exist, and the exact ones for f32 and bf16 weights below it.
TEST(CpuMatmulVnniTest, Int8PrecisionRoutesProductsByFormatAndRows) {
  if (!Int8ProductsHere()) GTEST_SKIP() << "no AVX512_VNNI here";
  Rng rng(44);
  const int64_t n = 97, k = 1056;
  for (WeightFormat format :
       {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    const TestWeights w = MakeWeights(format, n, k, rng);
    const bool quantized = format == WeightFormat::kMxfp4 || format == WeightFormat::kInt8;
    for (int64_t m : {int64_t{1}, int64_t{5}, kBf16MinRows - 1, kBf16MinRows, int64_t{40}}) {
      const std::vector<float> x = rng.Normal(m * k);
      std::vector<float> y(static_cast<size_t>(m * n)), fused(y.size()), expected(y.size());
      const bool bf16 = m >= kBf16MinRows && format != WeightFormat::kF32 && Bf16MatmulSupported();
      const MatmulAlgo algo = bf16        ? testing::Bf16ProductsAlgo()
                              : quantized ? MatmulAlgo::kInt8Vnni
                                          : MatmulAlgo::kStreaming;
      MatmulWithAlgo(algo, w.view, x.data(), m, expected.data());
      {
        testing::PrecisionScope int8(MatmulPrecision::kInt8);
        Matmul(w.view, x.data(), m, y.data());
        const MatmulProduct products[] = {{w.view, x.data(), fused.data()}};
        MatmulProducts(products, 1, m);
      }
      EXPECT_EQ(y, expected) << What(format, m, n, k);
      EXPECT_EQ(fused, expected) << What(format, m, n, k);
      if (quantized && !bf16) {
        std::vector<float> exact(y.size());
        Matmul(w.view, x.data(), m, exact.data());
        EXPECT_NE(y, exact) << What(format, m, n, k);
      }
    }
  }
  // Capped below AVX-512 the int8 products do not exist: the exact ones run.
  testing::IsaCap cap(Isa::kAvx2);
  const TestWeights w = MakeWeights(WeightFormat::kMxfp4, n, k, rng);
  const std::vector<float> x = rng.Normal(k);
  std::vector<float> exact(static_cast<size_t>(n)), y(exact.size());
  Matmul(w.view, x.data(), 1, exact.data());
  testing::PrecisionScope int8(MatmulPrecision::kInt8);
  EXPECT_FALSE(Int8MatmulSupported());
  Matmul(w.view, x.data(), 1, y.data());
  EXPECT_EQ(y, exact);
}

// The MoE products follow: a decode-sized expert group's GLU is the activation of its int8 gate
// and up products, and its scatter-add adds exactly its int8 product.
TEST(CpuMatmulVnniTest, GroupedExpertProductsUseTheInt8Products) {
  if (!Int8ProductsHere()) GTEST_SKIP() << "no AVX512_VNNI here";
  Rng rng(45);
  const GluParams situ{GluKind::kSitu, 4.0f, 25.0f};
  const int64_t n = 45, k = 1056;
  for (WeightFormat format : {WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    const TestWeights gate = MakeWeights(format, n, k, rng), up = MakeWeights(format, n, k, rng);
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{7}}) {
      const std::vector<float> x = rng.Normal(m * k);
      std::vector<float> g(static_cast<size_t>(m * n)), u(g.size()), expected(g.size());
      MatmulWithAlgo(MatmulAlgo::kInt8Vnni, gate.view, x.data(), m, g.data());
      MatmulWithAlgo(MatmulAlgo::kInt8Vnni, up.view, x.data(), m, u.data());
      GluReference(g.data(), u.data(), m * n, situ, expected.data());
      std::vector<float> h(g.size(), -1.0f), y(g.size(), 0.0f);
      {
        testing::PrecisionScope int8(MatmulPrecision::kInt8);
        const GluGroup group{gate.view, up.view, x.data(), nullptr, m, h.data()};
        MatmulGluGrouped(&group, 1, situ);
        const ScatterAddGroup add{gate.view, x.data(), m, nullptr, nullptr};
        MatmulScatterAddGrouped(&add, 1, n, y.data());
      }
      for (int64_t e = 0; e < m * n; ++e) {
        EXPECT_NEAR(h[e], expected[e], 4e-6 * std::fabs(expected[e]) + 1e-30)
            << What(format, m, n, k) << " e=" << e;
      }
      EXPECT_EQ(y, g) << What(format, m, n, k);
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cpu
