#include "kernels/cpu/matmul_glu.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/internal/glu_act.h"
#include "kernels/cpu/matmul_test_util.h"
#include "kernels/reference/glu.h"
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

const GluParams kSwiGlu{GluKind::kSwiGlu, 4.0f, 0.0f};
const GluParams kSitu{GluKind::kSitu, 4.0f, 25.0f};         // K3's β1, β2
const GluParams kSituUncapped{GluKind::kSitu, 2.5f, 0.0f};  // β2 ≤ 0: up not capped

std::string Name(const GluParams& p) {
  if (p.kind == GluKind::kSwiGlu) return "swiglu";
  return "situ(" + std::to_string(p.beta1) + "," + std::to_string(p.beta2) + ")";
}

// |act(g)| and |cap(u)| in f64, written independently of the code under test.
double ActMagnitude(double g, const GluParams& p) {
  const double sigmoid = 1.0 / (1.0 + std::exp(-g));
  if (p.kind == GluKind::kSwiGlu) return std::fabs(g * sigmoid);
  return std::fabs(p.beta1 * std::tanh(g / p.beta1) * sigmoid);
}
double CapMagnitude(double u, const GluParams& p) {
  if (p.kind == GluKind::kSitu && p.beta2 > 0) return std::fabs(p.beta2 * std::tanh(u / p.beta2));
  return std::fabs(u);
}

// h within the reference's error propagated through the activation: with εg, εu the matmul
// bounds of kF32Accumulation (× Σ|x·w| of each product), and |d act/dg| ≤ 1.1, |d cap/du| ≤ 1,
//   |h − h_ref| ≤ 1.2·εg·(|cap(u)| + εu) + |act(g)|·εu + 4e-6·|h_ref| + 1e-30
// (the last terms: the f32 exp/tanh approximations, a few ulp). A missing or doubled product in
// either sum, a swapped gate/up or a wrong column moves h far outside it.
::testing::AssertionResult GluCloseToReference(const std::vector<float>& h, const TestWeights& gate,
                                               const TestWeights& up, const std::vector<float>& x,
                                               int64_t m, const GluParams& act) {
  const int64_t n = gate.view.n, k = gate.view.k;
  const std::vector<float> g = Reference(gate, x, m), u = Reference(up, x, m);
  std::vector<float> expected(g.size());
  GluReference(g.data(), u.data(), static_cast<int64_t>(g.size()), act, expected.data());
  std::vector<float> scale_g(g.size()), scale_u(g.size());
  MatmulReference(Abs(x).data(), m, k, Abs(gate.f32).data(), n, scale_g.data());
  MatmulReference(Abs(x).data(), m, k, Abs(up.f32).data(), n, scale_u.data());
  const double rel = kF32Accumulation.per_sqrt_k * std::sqrt(static_cast<double>(k));
  for (int64_t e = 0; e < m * n; ++e) {
    const double eg = rel * scale_g[e], eu = rel * scale_u[e];
    const double bound = 1.2 * eg * (CapMagnitude(u[e], act) + eu) + ActMagnitude(g[e], act) * eu +
                         4e-6 * std::fabs(expected[e]) + 1e-30;
    const double err = std::fabs(static_cast<double>(h[e]) - expected[e]);
    if (!(err <= bound)) {
      return ::testing::AssertionFailure()
             << "h[" << e / n << ", " << e % n << "] = " << h[e] << ", reference " << expected[e]
             << " (g " << g[e] << ", u " << u[e] << "), error " << err << " > bound " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

const int64_t kGluRows[] = {1, 2, 3, 5, 17, 64};
// n and k: 1, primes, non-multiples of 8/16/32, and k over several 1024-wide blocks.
const int64_t kGluShapesNK[][2] = {{1, 1}, {31, 33},  {33, 97},  {97, 1000},
                                   {5, 7}, {2, 2100}, {257, 31}, {3, 16}};
const int64_t kGluMxfp4ShapesNK[][2] = {{1, 32},   {31, 64},  {33, 96},
                                        {97, 992}, {3, 1056}, {5, 2080}};

void CheckFormat(WeightFormat format, const int64_t (*shapes)[2], size_t num_shapes,
                 uint32_t seed) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    ASSERT_EQ(ActiveIsa(), isa);
    Rng rng(seed);
    for (size_t s = 0; s < num_shapes; ++s) {
      const int64_t n = shapes[s][0], k = shapes[s][1];
      const TestWeights gate = MakeWeights(format, n, k, rng);
      const TestWeights up = MakeWeights(format, n, k, rng);
      for (int64_t m : kGluRows) {
        const std::vector<float> x = rng.Normal(m * k);
        for (const GluParams& act : {kSwiGlu, kSitu, kSituUncapped}) {
          std::vector<float> h(static_cast<size_t>(m * n), -1.0f);
          MatmulGlu(gate.view, up.view, act, x.data(), m, h.data());
          EXPECT_TRUE(GluCloseToReference(h, gate, up, x, m, act))
              << testing::Describe(isa, m, n, k) << " " << Name(act);
        }
      }
    }
  }
}

TEST(CpuMatmulGluTest, F32WeightsMatchReferenceOnOddShapesOnEveryIsa) {
  CheckFormat(WeightFormat::kF32, kGluShapesNK, std::size(kGluShapesNK), 11);
}

TEST(CpuMatmulGluTest, Bf16WeightsMatchReferenceOnOddShapesOnEveryIsa) {
  CheckFormat(WeightFormat::kBf16, kGluShapesNK, std::size(kGluShapesNK), 12);
}

TEST(CpuMatmulGluTest, Mxfp4WeightsMatchReferenceOnOddShapesOnEveryIsa) {
  CheckFormat(WeightFormat::kMxfp4, kGluMxfp4ShapesNK, std::size(kGluMxfp4ShapesNK), 13);
}

TEST(CpuMatmulGluTest, Int8WeightsMatchReferenceOnOddShapesOnEveryIsa) {
  CheckFormat(WeightFormat::kInt8, kGluMxfp4ShapesNK, std::size(kGluMxfp4ShapesNK), 113);
}

// The activation alone, over the whole range (both tanh branches, σ saturating both ways, exp's
// clamp): gate row [1, 0] and up row [0, 1] make g and u exactly the two x entries.
TEST(CpuMatmulGluTest, ActivationMatchesReferenceOverTheWholeRange) {
  const float gate_w[2] = {1.0f, 0.0f}, up_w[2] = {0.0f, 1.0f};
  const MatmulWeights gate{WeightFormat::kF32, 1, 2, gate_w, nullptr};
  const MatmulWeights up{WeightFormat::kF32, 1, 2, up_w, nullptr};
  std::vector<float> x;
  for (double v = -120.0; v <= 120.0; v += 0.0371) x.push_back(static_cast<float>(v));
  for (float v : {0.0f, -0.0f, 0.625f, -0.625f, 0.6249999f, 1e-6f, -1e-6f, 1e-30f, 88.5f, -88.5f}) {
    x.push_back(v);
  }
  const int64_t count = static_cast<int64_t>(x.size());
  std::vector<float> pairs;  // (g, u): every g with a few u values, and u over the range too
  for (int64_t i = 0; i < count; ++i) {
    pairs.insert(pairs.end(), {x[i], x[(i * 7919) % count]});
  }
  const int64_t m = count;
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    for (const GluParams& act : {kSwiGlu, kSitu, kSituUncapped}) {
      std::vector<float> h(static_cast<size_t>(m));
      MatmulGlu(gate, up, act, pairs.data(), m, h.data());
      for (int64_t i = 0; i < m; ++i) {
        float expected = 0.0f;
        GluReference(&pairs[2 * i], &pairs[2 * i + 1], 1, act, &expected);
        EXPECT_NEAR(h[i], expected, 4e-6 * std::fabs(expected) + 1e-30)
            << IsaName(isa) << " " << Name(act) << " g=" << pairs[2 * i]
            << " u=" << pairs[2 * i + 1];
      }
    }
  }
}

// MatmulPrecision::kBf16: a group of at least kBf16MinRows rows of bf16 experts multiplies
// with bf16 products (the GLU of the bf16 gate and up products, to the activation's few ulps;
// not the f32 result); a smaller group keeps the exact result bit for bit. On AMX CPUs the
// bf16 products are the AMX tiles' (matmul_driver.h).
TEST(CpuMatmulGluTest, Bf16PrecisionUsesBf16ProductsForGroupsOfMinRows) {
  if (!Bf16MatmulSupported()) GTEST_SKIP() << "no AVX512_BF16 here";
  const MatmulAlgo bf16_algo = testing::Bf16ProductsAlgo();
  Rng rng(16);
  const int64_t n = 45, k = 1056;
  // MXFP4 and int8: decoded to bf16.
  for (WeightFormat format : {WeightFormat::kBf16, WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    const TestWeights gate = MakeWeights(format, n, k, rng);
    const TestWeights up = MakeWeights(format, n, k, rng);
    for (int64_t m : {kBf16MinRows - 1, kBf16MinRows, int64_t{40}, int64_t{64}, int64_t{70}}) {
      const std::vector<float> x = rng.Normal(m * k);
      std::vector<float> exact(static_cast<size_t>(m * n)), h(exact.size());
      MatmulGlu(gate.view, up.view, kSitu, x.data(), m, exact.data());
      {
        testing::PrecisionScope bf16(MatmulPrecision::kBf16);
        MatmulGlu(gate.view, up.view, kSitu, x.data(), m, h.data());
      }
      const std::string what =
          "format " + std::to_string(static_cast<int>(format)) + " m=" + std::to_string(m);
      if (m < kBf16MinRows) {
        EXPECT_EQ(h, exact) << what;
        continue;
      }
      EXPECT_NE(h, exact) << what;
      std::vector<float> g(exact.size()), u(exact.size()), expected(exact.size());
      MatmulWithAlgo(bf16_algo, gate.view, x.data(), m, g.data());
      MatmulWithAlgo(bf16_algo, up.view, x.data(), m, u.data());
      GluReference(g.data(), u.data(), m * n, kSitu, expected.data());
      for (int64_t e = 0; e < m * n; ++e) {
        EXPECT_NEAR(h[e], expected[e], 4e-6 * std::fabs(expected[e]) + 1e-30) << what << " e=" << e;
      }
    }
  }
}

// Under bf16 products, a group over gathered rows (repeats, any order) gives what MatmulGlu
// gives on the explicitly gathered x.
TEST(CpuMatmulGluTest, Bf16PrecisionGroupWithGatheredRowsEqualsGatheredProduct) {
  if (!Bf16MatmulSupported()) GTEST_SKIP() << "no AVX512_BF16 here";
  testing::PrecisionScope bf16(MatmulPrecision::kBf16);
  Rng rng(17);
  const int64_t n = 64, k = 1024, rows_in_x = 9, m = 70;
  const TestWeights gate = MakeWeights(WeightFormat::kBf16, n, k, rng);
  const TestWeights up = MakeWeights(WeightFormat::kBf16, n, k, rng);
  const std::vector<float> x = rng.Normal(rows_in_x * k);
  std::vector<int64_t> rows;
  std::vector<float> gathered;
  for (int64_t i = 0; i < m; ++i) {
    rows.push_back((i * 7 + 3) % rows_in_x);
    gathered.insert(gathered.end(), x.begin() + rows.back() * k, x.begin() + (rows.back() + 1) * k);
  }
  std::vector<float> expected(static_cast<size_t>(m * n)), h(expected.size());
  MatmulGlu(gate.view, up.view, kSitu, gathered.data(), m, expected.data());
  const GluGroup group{gate.view, up.view, x.data(), rows.data(), m, h.data()};
  MatmulGluGrouped(&group, 1, kSitu);
  EXPECT_EQ(h, expected);
}

// Under bf16 products, one call with several groups (experts of different sizes, some below
// kBf16MinRows, odd widths; on AMX CPUs the big ones run as one batch) gives each group exactly
// what it gives alone.
TEST(CpuMatmulGluTest, Bf16PrecisionManyGroupsEqualEachGroupAlone) {
  if (!Bf16MatmulSupported()) GTEST_SKIP() << "no AVX512_BF16 here";
  testing::PrecisionScope bf16(MatmulPrecision::kBf16);
  Rng rng(18);
  const int64_t n = 37, k = 288;
  const int64_t sizes[] = {16, 3, 40, 17, 0, 70};
  std::vector<TestWeights> gates, ups;
  std::vector<std::vector<float>> xs, hs, alone;
  for (int64_t m : sizes) {
    gates.push_back(MakeWeights(WeightFormat::kBf16, n, k, rng));
    ups.push_back(MakeWeights(WeightFormat::kBf16, n, k, rng));
    xs.push_back(rng.Normal(m * k));
    hs.emplace_back(static_cast<size_t>(m * n), -1.0f);
    alone.emplace_back(static_cast<size_t>(m * n), -2.0f);
  }
  std::vector<GluGroup> groups;
  for (size_t g = 0; g < xs.size(); ++g) {
    groups.push_back({gates[g].view, ups[g].view, xs[g].data(), nullptr, sizes[g], hs[g].data()});
  }
  MatmulGluGrouped(groups.data(), static_cast<int64_t>(groups.size()), kSitu);
  for (size_t g = 0; g < xs.size(); ++g) {
    GluGroup one = groups[g];
    one.h = alone[g].data();
    MatmulGluGrouped(&one, 1, kSitu);
    EXPECT_EQ(hs[g], alone[g]) << "group " << g << " of " << sizes[g] << " rows";
  }
}

// On AMX (bf16 products): each task runs a group's gate and up blocks and the activation itself.
// h must be, bit for bit, the activation (vectorised, elementwise) of the bf16 products Matmul
// gives for gate and up — across groups of many row pairs, widths with a partial last block and
// several tasks per group (W rows read in place or packed: k a multiple of 32 or not; MXFP4
// decoded), gathered rows, and any thread count.
TEST(CpuMatmulGluTest, AmxGroupsEqualActivationOfBf16ProductsForAnyThreadCount) {
  if (!Bf16MatmulUsesAmx()) GTEST_SKIP() << "no AMX-BF16 here";
  testing::PrecisionScope bf16(MatmulPrecision::kBf16);
  const int saved = omp_get_max_threads();
  Rng rng(19);
  struct Spec {
    WeightFormat format;
    int64_t n, k, m;
  };
  const Spec specs[] = {{WeightFormat::kBf16, 300, 1024, 70}, {WeightFormat::kBf16, 33, 96, 16},
                        {WeightFormat::kBf16, 64, 100, 45},   {WeightFormat::kMxfp4, 290, 256, 33},
                        {WeightFormat::kInt8, 70, 320, 17},   {WeightFormat::kBf16, 300, 1024, 512},
                        {WeightFormat::kBf16, 40, 64, 5}};
  const int64_t x_rows = 600;
  std::vector<TestWeights> gates, ups;
  std::vector<std::vector<float>> xs;
  std::vector<std::vector<int64_t>> rows;
  std::vector<std::vector<float>> expected;
  for (const Spec& s : specs) {
    gates.push_back(MakeWeights(s.format, s.n, s.k, rng));
    ups.push_back(MakeWeights(s.format, s.n, s.k, rng));
    xs.push_back(rng.Normal(x_rows * s.k));
    rows.emplace_back();
    std::vector<float> gathered;
    for (int64_t i = 0; i < s.m; ++i) {
      rows.back().push_back((i * 7 + s.m) % x_rows);  // repeats once m > 600 / gcd
      const float* r = xs.back().data() + rows.back().back() * s.k;
      gathered.insert(gathered.end(), r, r + s.k);
    }
    std::vector<float> g(static_cast<size_t>(s.m * s.n)), u(g.size()), h(g.size());
    const MatmulAlgo algo = s.m >= kBf16MinRows ? MatmulAlgo::kAmxBf16 : MatmulAlgo::kAuto;
    MatmulWithAlgo(algo, gates.back().view, gathered.data(), s.m, g.data());
    MatmulWithAlgo(algo, ups.back().view, gathered.data(), s.m, u.data());
    internal::GluActAvx512(g.data(), u.data(), s.m * s.n, kSitu, h.data());
    if (s.m < kBf16MinRows)
      MatmulGlu(gates.back().view, ups.back().view, kSitu, gathered.data(), s.m,
                h.data());  // below the bf16 threshold: f32 as ever
    expected.push_back(h);
  }
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<std::vector<float>> hs;
    std::vector<GluGroup> groups;
    for (size_t g = 0; g < std::size(specs); ++g) {
      hs.emplace_back(expected[g].size(), -7.0f);
      groups.push_back(
          {gates[g].view, ups[g].view, xs[g].data(), rows[g].data(), specs[g].m, hs[g].data()});
    }
    MatmulGluGrouped(groups.data(), static_cast<int64_t>(groups.size()), kSitu);
    for (size_t g = 0; g < std::size(specs); ++g) {
      EXPECT_EQ(hs[g], expected[g]) << "group " << g << " threads " << threads;
    }
  }
  omp_set_num_threads(saved);
}

// Batching must not change a row: m = 67 spans two chunks and, for MXFP4, the scratch path.
TEST(CpuMatmulGluTest, RowOfBatchIsBitIdenticalToRowAloneAndThreadCountDoesNotMatter) {
  const int saved = omp_get_max_threads();
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    for (WeightFormat format :
         {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kMxfp4, WeightFormat::kInt8}) {
      Rng rng(14);
      const int64_t m = 67, n = 45, k = 2080;
      const TestWeights gate = MakeWeights(format, n, k, rng), up = MakeWeights(format, n, k, rng);
      const std::vector<float> x = rng.Normal(m * k);
      std::vector<float> batch(static_cast<size_t>(m * n)), one_thread(batch.size());
      MatmulGlu(gate.view, up.view, kSitu, x.data(), m, batch.data());
      omp_set_num_threads(1);
      MatmulGlu(gate.view, up.view, kSitu, x.data(), m, one_thread.data());
      omp_set_num_threads(saved);
      EXPECT_EQ(batch, one_thread) << IsaName(isa) << " format " << static_cast<int>(format);
      for (int64_t i : {int64_t{0}, int64_t{3}, int64_t{63}, int64_t{64}, m - 1}) {
        std::vector<float> alone(static_cast<size_t>(n));
        MatmulGlu(gate.view, up.view, kSitu, x.data() + i * k, 1, alone.data());
        EXPECT_EQ(alone, std::vector<float>(batch.begin() + i * n, batch.begin() + (i + 1) * n))
            << IsaName(isa) << " format " << static_cast<int>(format) << " row " << i;
      }
    }
  }
}

// Groups of different formats and shapes, with gathered rows (repeats, any order) and empty
// groups, give exactly what MatmulGlu gives on each group's gathered x.
TEST(CpuMatmulGluTest, GroupedEqualsOneProductPerGroupWithGatheredRows) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    Rng rng(15);
    const int64_t rows_in_x = 9;
    struct Spec {
      WeightFormat format;
      int64_t n, k;
      std::vector<int64_t> rows;
    };
    const std::vector<Spec> specs = {{WeightFormat::kBf16, 37, 96, {4, 0, 4, 8}},
                                     {WeightFormat::kMxfp4, 70, 96, {1}},
                                     {WeightFormat::kBf16, 37, 96, {}},
                                     {WeightFormat::kF32, 5, 33, {2, 3, 5, 6, 7, 8, 0}},
                                     {WeightFormat::kMxfp4, 300, 1056, {8, 7}},
                                     {WeightFormat::kInt8, 33, 1056, {0, 8, 1, 7, 2, 6}}};
    std::vector<TestWeights> gates, ups;
    std::vector<std::vector<float>> xs, hs;
    std::vector<GluGroup> groups;
    for (const Spec& s : specs) {
      gates.push_back(MakeWeights(s.format, s.n, s.k, rng));
      ups.push_back(MakeWeights(s.format, s.n, s.k, rng));
      xs.push_back(rng.Normal(rows_in_x * s.k));
      hs.emplace_back(s.rows.size() * s.n, -1.0f);
    }
    for (size_t g = 0; g < specs.size(); ++g) {
      groups.push_back({gates[g].view, ups[g].view, xs[g].data(), specs[g].rows.data(),
                        static_cast<int64_t>(specs[g].rows.size()), hs[g].data()});
    }
    MatmulGluGrouped(groups.data(), static_cast<int64_t>(groups.size()), kSitu);
    for (size_t g = 0; g < specs.size(); ++g) {
      const int64_t m = static_cast<int64_t>(specs[g].rows.size()), k = specs[g].k;
      std::vector<float> gathered;
      for (int64_t r : specs[g].rows) {
        gathered.insert(gathered.end(), xs[g].begin() + r * k, xs[g].begin() + (r + 1) * k);
      }
      std::vector<float> alone(static_cast<size_t>(m * specs[g].n));
      MatmulGlu(gates[g].view, ups[g].view, kSitu, gathered.data(), m, alone.data());
      EXPECT_EQ(hs[g], alone) << IsaName(isa) << " group " << g;
    }
  }
}

TEST(CpuMatmulGluTest, ScalarIsaUsesTheReference) {
  IsaCap cap(Isa::kScalar);
  Rng rng(16);
  const int64_t m = 3, n = 19, k = 64;
  const TestWeights gate = MakeWeights(WeightFormat::kMxfp4, n, k, rng);
  const TestWeights up = MakeWeights(WeightFormat::kMxfp4, n, k, rng);
  const std::vector<float> x = rng.Normal(m * k);
  std::vector<float> h(static_cast<size_t>(m * n));
  MatmulGlu(gate.view, up.view, kSitu, x.data(), m, h.data());
  const std::vector<float> g = Reference(gate, x, m), u = Reference(up, x, m);
  std::vector<float> expected(g.size());
  GluReference(g.data(), u.data(), m * n, kSitu, expected.data());
  EXPECT_EQ(h, expected);
}

TEST(CpuMatmulGluTest, EmptyInnerDimensionGivesZeros) {
  const float unused = 0.0f;
  const MatmulWeights w{WeightFormat::kF32, 5, 0, &unused, nullptr};
  std::vector<float> h(10, 7.0f);
  MatmulGlu(w, w, kSwiGlu, &unused, 2, h.data());
  EXPECT_EQ(h, std::vector<float>(10, 0.0f));
}

}  // namespace
}  // namespace strata::kernels::cpu
