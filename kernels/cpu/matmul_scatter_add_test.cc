#include "kernels/cpu/matmul_scatter_add.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/matmul_test_util.h"
#include "kernels/reference/matmul.h"

namespace strata::kernels::cpu {
namespace {

using testing::Abs;
using testing::IsaCap;
using testing::kF32Accumulation;
using testing::MakeWeights;
using testing::Reference;
using testing::Rng;
using testing::SupportedIsas;
using testing::TestWeights;

// Experts of one MoE layer in miniature: groups of different formats and k (same n), rows that
// repeat within and across groups, per-row scales (one group unscaled, one with rows 0..m−1).
struct Problem {
  int64_t n = 0, y_rows = 11;
  std::vector<TestWeights> w;
  std::vector<std::vector<float>> x, scale;
  std::vector<std::vector<int64_t>> rows;
  std::vector<float> y0;
  std::vector<ScatterAddGroup> groups;
};

Problem MakeProblem(int64_t n, Rng& rng) {
  Problem p;
  p.n = n;
  struct Spec {
    WeightFormat format;
    int64_t k;
    std::vector<int64_t> rows;
    bool scaled;
  };
  const std::vector<Spec> specs = {{WeightFormat::kBf16, 97, {3, 0, 10, 3}, true},
                                   {WeightFormat::kMxfp4, 64, {}, true},
                                   {WeightFormat::kMxfp4, 2080, {10, 9, 8, 7, 6, 5, 4}, true},
                                   {WeightFormat::kInt8, 1056, {1, 2, 1, 9, 0}, true},
                                   {WeightFormat::kF32, 31, {0, 1, 2}, false},
                                   {WeightFormat::kBf16, 1000, {5}, true}};
  for (const Spec& s : specs) {
    const int64_t m = s.rows.empty() ? 0 : static_cast<int64_t>(s.rows.size());
    p.w.push_back(MakeWeights(s.format, n, s.k, rng));
    p.x.push_back(rng.Normal(m * s.k));
    p.scale.push_back(rng.Normal(m));
    p.rows.push_back(s.rows);
  }
  // One more group on rows 0..5 given as null.
  p.w.push_back(MakeWeights(WeightFormat::kBf16, n, 33, rng));
  p.x.push_back(rng.Normal(6 * 33));
  p.scale.push_back(rng.Normal(6));
  p.rows.emplace_back();
  p.y0 = rng.Normal(p.y_rows * n);
  for (size_t g = 0; g < p.w.size(); ++g) {
    const bool identity = g + 1 == p.w.size();
    const int64_t m = identity ? 6 : static_cast<int64_t>(p.rows[g].size());
    p.groups.push_back({p.w[g].view, p.x[g].data(), m, identity ? nullptr : p.rows[g].data(),
                        g == 3 ? nullptr : p.scale[g].data()});
  }
  return p;
}

// MatmulPrecision::kBf16: a group of at least kBf16MinRows rows of bf16 or MXFP4 weights adds
// exactly the bf16 product (the lossy tiles'; on AMX CPUs the AMX tiles'); a smaller group, the
// f32 one.
TEST(CpuMatmulScatterAddTest, Bf16PrecisionFollowsMatmulPerGroupSize) {
  if (!Bf16MatmulSupported()) GTEST_SKIP() << "no AVX512_BF16 here";
  Rng rng(31);
  const int64_t n = 70, k = 1056;
  for (WeightFormat format : {WeightFormat::kBf16, WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    const TestWeights w = MakeWeights(format, n, k, rng);
    for (int64_t m : {kBf16MinRows - 1, kBf16MinRows, int64_t{33}, int64_t{64}}) {
      const std::vector<float> x = rng.Normal(m * k);
      std::vector<float> exact(static_cast<size_t>(m * n)), lossy(exact.size());
      Matmul(w.view, x.data(), m, exact.data());
      MatmulWithAlgo(testing::Bf16ProductsAlgo(), w.view, x.data(), m, lossy.data());
      std::vector<float> y(exact.size(), 0.0f);
      const ScatterAddGroup group{w.view, x.data(), m, nullptr, nullptr};
      {
        testing::PrecisionScope bf16(MatmulPrecision::kBf16);
        MatmulScatterAddGrouped(&group, 1, n, y.data());
      }
      const int f = static_cast<int>(format);
      EXPECT_EQ(y, m >= kBf16MinRows ? lossy : exact) << "format " << f << " m=" << m;
      EXPECT_NE(exact, lossy) << "format " << f << " m=" << m;
    }
  }
}

// Bf16 products with gathered rows, scales and groups of both sizes mixed: each group adds, in
// the given order, its own product (bf16 from kBf16MinRows rows, f32 below) times its scales.
TEST(CpuMatmulScatterAddTest, Bf16PrecisionMixedGroupsAddInOrder) {
  if (!Bf16MatmulSupported()) GTEST_SKIP() << "no AVX512_BF16 here";
  const MatmulAlgo bf16_algo = testing::Bf16ProductsAlgo();
  Rng rng(32);
  const int64_t n = 48, k = 256, y_rows = 11;
  const int64_t sizes[] = {70, 3, 18};
  std::vector<TestWeights> ws;
  std::vector<std::vector<float>> xs, scales;
  std::vector<std::vector<int64_t>> rows;
  std::vector<ScatterAddGroup> groups;
  for (int64_t m : sizes) {
    ws.push_back(MakeWeights(WeightFormat::kBf16, n, k, rng));
    xs.push_back(rng.Normal(m * k));
    scales.push_back(rng.Normal(m));
    rows.emplace_back();
    for (int64_t i = 0; i < m; ++i) rows.back().push_back((i * 5 + m) % y_rows);
  }
  for (size_t g = 0; g < ws.size(); ++g) {
    groups.push_back({ws[g].view, xs[g].data(), sizes[g], rows[g].data(), scales[g].data()});
  }
  const std::vector<float> y0 = rng.Normal(y_rows * n);
  std::vector<float> expected = y0;
  for (size_t g = 0; g < ws.size(); ++g) {
    const int64_t m = sizes[g];
    std::vector<float> p(static_cast<size_t>(m * n));
    MatmulWithAlgo(m >= kBf16MinRows ? bf16_algo : MatmulAlgo::kAuto, ws[g].view, xs[g].data(), m,
                   p.data());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float& out = expected[rows[g][i] * n + j];
        out = std::fma(scales[g][i], p[i * n + j], out);
      }
    }
  }
  std::vector<float> y = y0;
  testing::PrecisionScope bf16(MatmulPrecision::kBf16);
  MatmulScatterAddGrouped(groups.data(), static_cast<int64_t>(groups.size()), n, y.data());
  EXPECT_EQ(y, expected);
}

// On AMX (bf16 products), tasks are column blocks of up to 128 spanning every group, and the
// tiles add into y themselves. Still: each group adds, in the given order, exactly its bf16
// product (Matmul's) times its scales — over groups of many row pairs with repeated rows, AMX
// groups next to each other (the next one's rows prefetched and read in place) and around f32
// ones, a partial last column block, k a multiple of 32 or not, MXFP4, and any thread count.
TEST(CpuMatmulScatterAddTest, AmxGroupsAddInOrderForAnyThreadCount) {
  if (!Bf16MatmulUsesAmx()) GTEST_SKIP() << "no AMX-BF16 here";
  testing::PrecisionScope bf16(MatmulPrecision::kBf16);
  const int saved = omp_get_max_threads();
  Rng rng(33);
  const int64_t n = 300, y_rows = 13;  // rows repeat within a tile's 16
  struct Spec {
    WeightFormat format;
    int64_t k, m;
  };
  const Spec specs[] = {{WeightFormat::kBf16, 256, 70}, {WeightFormat::kBf16, 256, 18},
                        {WeightFormat::kBf16, 256, 3},  {WeightFormat::kMxfp4, 512, 40},
                        {WeightFormat::kInt8, 256, 21}, {WeightFormat::kBf16, 100, 33},
                        {WeightFormat::kBf16, 256, 16}, {WeightFormat::kBf16, 1024, 200}};
  std::vector<TestWeights> ws;
  std::vector<std::vector<float>> xs, scales;
  std::vector<std::vector<int64_t>> rows;
  std::vector<ScatterAddGroup> groups;
  for (const Spec& s : specs) {
    ws.push_back(MakeWeights(s.format, n, s.k, rng));
    xs.push_back(rng.Normal(s.m * s.k));
    scales.push_back(rng.Normal(s.m));
    rows.emplace_back();
    for (int64_t i = 0; i < s.m; ++i) rows.back().push_back((i * 5 + s.m) % y_rows);
  }
  for (size_t g = 0; g < ws.size(); ++g) {
    groups.push_back({ws[g].view, xs[g].data(), specs[g].m, rows[g].data(), scales[g].data()});
  }
  const std::vector<float> y0 = rng.Normal(y_rows * n);
  std::vector<float> expected = y0;
  for (size_t g = 0; g < ws.size(); ++g) {
    const int64_t m = specs[g].m;
    std::vector<float> p(static_cast<size_t>(m * n));
    MatmulWithAlgo(m >= kBf16MinRows ? MatmulAlgo::kAmxBf16 : MatmulAlgo::kAuto, ws[g].view,
                   xs[g].data(), m, p.data());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float& out = expected[rows[g][i] * n + j];
        out = std::fma(scales[g][i], p[i * n + j], out);
      }
    }
  }
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> y = y0;
    MatmulScatterAddGrouped(groups.data(), static_cast<int64_t>(groups.size()), n, y.data());
    EXPECT_EQ(y, expected) << "threads " << threads;
  }
  omp_set_num_threads(saved);
}

TEST(CpuMatmulScatterAddTest, MatchesReferenceOnEveryIsa) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    for (int64_t n : {1, 7, 33, 300}) {
      Rng rng(21);
      Problem p = MakeProblem(n, rng);
      std::vector<float> y = p.y0;
      MatmulScatterAddGrouped(p.groups.data(), static_cast<int64_t>(p.groups.size()), n, y.data());
      // f64 expectation, and the bound: the matmul bound per product plus f32 rounding of the adds.
      std::vector<double> expected(p.y0.begin(), p.y0.end()), bound(y.size(), 0.0);
      for (size_t e = 0; e < y.size(); ++e) bound[e] = 1e-6 * std::fabs(p.y0[e]);
      for (const ScatterAddGroup& g : p.groups) {
        const size_t gi = static_cast<size_t>(&g - p.groups.data());
        const std::vector<float> ref = Reference(p.w[gi], p.x[gi], g.m);
        std::vector<float> mag(ref.size());
        MatmulReference(Abs(p.x[gi]).data(), g.m, g.w.k, Abs(p.w[gi].f32).data(), n, mag.data());
        const double rel = kF32Accumulation.per_sqrt_k * std::sqrt(static_cast<double>(g.w.k));
        for (int64_t i = 0; i < g.m; ++i) {
          const double s = g.scale != nullptr ? g.scale[i] : 1.0;
          const int64_t row = g.rows != nullptr ? g.rows[i] : i;
          for (int64_t c = 0; c < n; ++c) {
            expected[row * n + c] += s * ref[i * n + c];
            bound[row * n + c] +=
                std::fabs(s) * (rel * mag[i * n + c] + 1e-6 * std::fabs(ref[i * n + c]));
          }
        }
      }
      for (size_t e = 0; e < y.size(); ++e) {
        ASSERT_LE(std::fabs(y[e] - expected[e]), bound[e] + 1e-6 * std::fabs(expected[e]))
            << IsaName(isa) << " n=" << n << " y[" << e / n << ", " << e % n << "]";
      }
    }
  }
}

// Grouped = Matmul per group, then y[row] = fma(s, t, y[row]) in group order, for
// any thread count.
TEST(CpuMatmulScatterAddTest, EqualsSequentialMatmulAndAddsForAnyThreadCount) {
  const int saved = omp_get_max_threads();
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    Rng rng(22);
    const int64_t n = 700;  // 1.1 MB of weights: runs on several threads
    Problem p = MakeProblem(n, rng);
    std::vector<float> sequential = p.y0;
    for (const ScatterAddGroup& g : p.groups) {
      std::vector<float> t(static_cast<size_t>(g.m * n));
      Matmul(g.w, g.x, g.m, t.data());
      for (int64_t i = 0; i < g.m; ++i) {
        const float s = g.scale != nullptr ? g.scale[i] : 1.0f;
        float* dst = sequential.data() + (g.rows != nullptr ? g.rows[i] : i) * n;
        for (int64_t c = 0; c < n; ++c) dst[c] = std::fma(s, t[i * n + c], dst[c]);
      }
    }
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::vector<float> y = p.y0;
      MatmulScatterAddGrouped(p.groups.data(), static_cast<int64_t>(p.groups.size()), n, y.data());
      EXPECT_EQ(y, sequential) << IsaName(isa) << " threads " << threads;
    }
    omp_set_num_threads(saved);
  }
}

TEST(CpuMatmulScatterAddTest, ScalarIsaMatchesReference) {
  IsaCap cap(Isa::kScalar);
  Rng rng(23);
  Problem p = MakeProblem(9, rng);
  std::vector<float> y = p.y0;
  MatmulScatterAddGrouped(p.groups.data(), static_cast<int64_t>(p.groups.size()), 9, y.data());
  std::vector<float> expected = p.y0;
  for (const ScatterAddGroup& g : p.groups) {
    const std::vector<float> ref = Reference(p.w[static_cast<size_t>(&g - p.groups.data())],
                                             p.x[static_cast<size_t>(&g - p.groups.data())], g.m);
    for (int64_t i = 0; i < g.m; ++i) {
      const float s = g.scale != nullptr ? g.scale[i] : 1.0f;
      for (int64_t c = 0; c < 9; ++c) {
        float& e = expected[(g.rows != nullptr ? g.rows[i] : i) * 9 + c];
        e = std::fma(s, ref[i * 9 + c], e);
      }
    }
  }
  EXPECT_EQ(y, expected);
}

}  // namespace
}  // namespace strata::kernels::cpu
