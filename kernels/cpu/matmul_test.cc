#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/cpu/matmul_test_util.h"
#include "kernels/reference/matmul.h"

namespace strata::kernels::cpu {
namespace {

using testing::CloseToReference;
using testing::Describe;
using testing::IsaCap;
using testing::kBf16Activations;
using testing::kF32Accumulation;
using testing::MakeWeights;
using testing::Reference;
using testing::Rng;
using testing::SupportedIsas;
using testing::TestWeights;

const int64_t kRows[] = {1, 2, 3, 7, 17, 64, 129};

// Every k and n of {1, 31, 32, 33, 97, 1000} appears, plus k spanning several 1024-wide blocks
// with a ragged last block (2100).
const int64_t kShapesNK[][2] = {{1, 1},     {31, 32},  {32, 33},  {33, 97},   {97, 1000},
                                {1000, 31}, {1, 1000}, {1000, 1}, {37, 2100}, {5, 33}};

// MXFP4 and int8 k is a multiple of 32: one block, a few, just under and over one 1024 k block.
const int64_t kMxfp4ShapesNK[][2] = {{1, 32},    {31, 64},  {33, 96},  {97, 992},
                                     {32, 1056}, {5, 2080}, {1000, 32}};

void CheckAgainstReference(WeightFormat format, const int64_t (*shapes)[2], size_t num_shapes,
                           uint32_t seed) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    ASSERT_EQ(ActiveIsa(), isa);
    Rng rng(seed);
    for (size_t s = 0; s < num_shapes; ++s) {
      const int64_t n = shapes[s][0], k = shapes[s][1];
      const TestWeights w = MakeWeights(format, n, k, rng);
      for (int64_t m : kRows) {
        const std::vector<float> x = rng.Normal(m * k);
        std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
        Matmul(w.view, x.data(), m, y.data());
        EXPECT_TRUE(CloseToReference(y, w, x, m, kF32Accumulation)) << Describe(isa, m, n, k);
      }
    }
  }
}

TEST(CpuMatmulTest, F32WeightsMatchReferenceOnOddShapesOnEveryIsa) {
  CheckAgainstReference(WeightFormat::kF32, kShapesNK, std::size(kShapesNK), 1);
}

TEST(CpuMatmulTest, Bf16WeightsMatchReferenceOnOddShapesOnEveryIsa) {
  CheckAgainstReference(WeightFormat::kBf16, kShapesNK, std::size(kShapesNK), 2);
}

TEST(CpuMatmulTest, Mxfp4WeightsMatchReferenceOnOddShapesOnEveryIsa) {
  CheckAgainstReference(WeightFormat::kMxfp4, kMxfp4ShapesNK, std::size(kMxfp4ShapesNK), 3);
}

TEST(CpuMatmulTest, Int8WeightsMatchReferenceOnOddShapesOnEveryIsa) {
  CheckAgainstReference(WeightFormat::kInt8, kMxfp4ShapesNK, std::size(kMxfp4ShapesNK), 31);
}

// Int8 products by bf16 scales at the ends of their range (subnormal and huge decoded weights)
// on both the in-register (m = 1) and scratch-tile (m = 12) paths.
TEST(CpuMatmulTest, Int8ExtremeScalesDecodeLikeTheReference) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    Rng rng(32);
    const int64_t n = 21, k = 96;
    // Scale exponent fields 0..2 (subnormal scales) and 193..199 (weights ~2^72).
    for (auto [lo, hi] : {std::pair{7, 9}, std::pair{200, 206}}) {
      const TestWeights w = MakeWeights(WeightFormat::kInt8, n, k, rng, lo, hi);
      for (int64_t m : {int64_t{1}, int64_t{12}}) {
        std::vector<float> x = rng.Normal(m * k);
        if (lo > 127) {
          for (float& v : x) v *= 1e-6f;  // sums stay well inside f32
        }
        std::vector<float> y(static_cast<size_t>(m * n));
        Matmul(w.view, x.data(), m, y.data());
        EXPECT_TRUE(CloseToReference(y, w, x, m, kF32Accumulation))
            << Describe(isa, m, n, k) << " scale exponents " << lo << ".." << hi;
      }
    }
  }
}

// Batching must not change a row's result: m = 67 spans two row chunks, several x tiles, and
// for MXFP4 the decode-to-scratch path, while m = 1 decodes in registers.
TEST(CpuMatmulTest, RowOfBatchIsBitIdenticalToRowAlone) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    // 2080 = 2 · 1024 + 32: three k blocks; 1037 (bf16, f32): a last block that ends inside a
    // vector, which a batch reads from a zero-padded decoded slice and a row alone in place.
    for (const auto& [format, k] : {std::pair{WeightFormat::kF32, int64_t{2080}},
                                    std::pair{WeightFormat::kBf16, int64_t{2080}},
                                    std::pair{WeightFormat::kMxfp4, int64_t{2080}},
                                    std::pair{WeightFormat::kInt8, int64_t{2080}},
                                    std::pair{WeightFormat::kF32, int64_t{1037}},
                                    std::pair{WeightFormat::kBf16, int64_t{1037}}}) {
      Rng rng(4);
      const int64_t m = 67, n = 45;
      const TestWeights w = MakeWeights(format, n, k, rng);
      const std::vector<float> x = rng.Normal(m * k);
      std::vector<float> batch(static_cast<size_t>(m * n));
      Matmul(w.view, x.data(), m, batch.data());
      for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{63}, int64_t{64}, m - 1}) {
        std::vector<float> alone(static_cast<size_t>(n));
        Matmul(w.view, x.data() + i * k, 1, alone.data());
        EXPECT_EQ(alone, std::vector<float>(batch.begin() + i * n, batch.begin() + (i + 1) * n))
            << IsaName(isa) << " format " << static_cast<int>(format) << " k " << k << " row " << i;
      }
    }
  }
}

TEST(CpuMatmulTest, ResultDoesNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    for (WeightFormat format :
         {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kMxfp4, WeightFormat::kInt8}) {
      Rng rng(5);
      const int64_t m = 9, n = 1000, k = 1024 + 64;  // big enough to run on several threads
      const TestWeights w = MakeWeights(format, n, k, rng);
      const std::vector<float> x = rng.Normal(m * k);
      std::vector<float> one(static_cast<size_t>(m * n)), many(one.size());
      omp_set_num_threads(1);
      Matmul(w.view, x.data(), m, one.data());
      omp_set_num_threads(3);  // more threads than this machine may have: uneven task split
      Matmul(w.view, x.data(), m, many.data());
      omp_set_num_threads(saved);
      EXPECT_EQ(one, many) << IsaName(isa) << " format " << static_cast<int>(format);
    }
  }
}

// Several products in one call (q / k / v of one input) give what each gives alone, bit for bit:
// shared and distinct x (the same W with another x), every format (MXFP4 over three k blocks), an
// empty product, k = 0, one to 70 rows (row chunks, MXFP4's scratch path), 1 and 3 threads, f32 and
// bf16 precision.
TEST(CpuMatmulTest, ProductsInOneCallEqualEachProductAlone) {
  const int saved = omp_get_max_threads();
  Rng rng(12);
  const int64_t k1 = 1000, k2 = 2080, k3 = 33;
  const TestWeights wq = MakeWeights(WeightFormat::kBf16, 97, k1, rng);
  const TestWeights wk = MakeWeights(WeightFormat::kBf16, 33, k1, rng);
  const TestWeights wf = MakeWeights(WeightFormat::kF32, 31, k1, rng);
  const TestWeights wm = MakeWeights(WeightFormat::kMxfp4, 45, k2, rng);
  const TestWeights wi = MakeWeights(WeightFormat::kInt8, 37, k2, rng);
  const TestWeights ws = MakeWeights(WeightFormat::kBf16, 1, k3, rng);
  const TestWeights we = MakeWeights(WeightFormat::kBf16, 0, k1, rng);
  const float unused = 0.0f;
  const MatmulWeights zero_k{WeightFormat::kF32, 5, 0, &unused, nullptr};
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    for (MatmulPrecision precision : {MatmulPrecision::kF32, MatmulPrecision::kBf16}) {
      testing::PrecisionScope scope(precision);
      for (int threads : {1, 3}) {
        omp_set_num_threads(threads);
        for (int64_t m : {1, 3, 17, 70}) {
          const std::vector<float> x1 = rng.Normal(m * k1), x2 = rng.Normal(m * k2),
                                   x3 = rng.Normal(m * k3);
          const std::vector<std::pair<MatmulWeights, const float*>> cases = {
              {wq.view, x1.data()}, {wm.view, x2.data()},     {wk.view, x1.data()},
              {we.view, x1.data()}, {wf.view, x1.data()},     {ws.view, x3.data()},
              {zero_k, x3.data()},  {wq.view, x2.data() + 7}, {wi.view, x2.data()}};
          std::vector<std::vector<float>> together(cases.size()), alone(cases.size());
          std::vector<MatmulProduct> products;
          for (size_t p = 0; p < cases.size(); ++p) {
            const int64_t n = cases[p].first.n;
            together[p].assign(static_cast<size_t>(m * n), -1.0f);
            alone[p].assign(static_cast<size_t>(m * n), -2.0f);
            products.push_back({cases[p].first, cases[p].second, together[p].data()});
          }
          MatmulProducts(products.data(), static_cast<int64_t>(products.size()), m);
          for (size_t p = 0; p < cases.size(); ++p) {
            Matmul(cases[p].first, cases[p].second, m, alone[p].data());
            EXPECT_EQ(together[p], alone[p])
                << IsaName(isa) << " " << MatmulPrecisionInEffect() << " threads " << threads
                << " m " << m << " product " << p;
          }
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

// Scale byte 0 is 2^-127 (the decoded weights are f32 subnormals) and 0xFF is NaN; both the
// in-register (m = 1) and the scratch-tile (m = 12) paths must decode like DecodeMxfp4.
TEST(CpuMatmulTest, Mxfp4SubnormalAndNanScalesDecodeLikeTheReference) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    Rng rng(6);
    const int64_t n = 21, k = 64;
    const TestWeights tiny = MakeWeights(WeightFormat::kMxfp4, n, k, rng, 0, 2);
    TestWeights nan_rows = MakeWeights(WeightFormat::kMxfp4, n, k, rng);
    for (int64_t j = 0; j < n; j += 3) nan_rows.scales[static_cast<size_t>(j * 2 + 1)] = 0xFF;
    for (int64_t m : {int64_t{1}, int64_t{12}}) {
      const std::vector<float> x = rng.Normal(m * k);
      std::vector<float> y(static_cast<size_t>(m * n));
      Matmul(tiny.view, x.data(), m, y.data());
      EXPECT_TRUE(CloseToReference(y, tiny, x, m, kF32Accumulation)) << Describe(isa, m, n, k);

      Matmul(nan_rows.view, x.data(), m, y.data());
      const std::vector<float> ref = Reference(nan_rows, x, m);
      for (int64_t e = 0; e < m * n; ++e) {
        EXPECT_EQ(std::isnan(y[e]), (e % n) % 3 == 0) << Describe(isa, m, n, k) << " y " << e;
        EXPECT_EQ(std::isnan(ref[e]), (e % n) % 3 == 0) << "reference y " << e;
        if (!std::isnan(ref[e])) {
          EXPECT_NEAR(y[e], ref[e], 1e-4 * (1.0 + std::fabs(ref[e]))) << Describe(isa, m, n, k);
        }
      }
    }
  }
}

TEST(CpuMatmulTest, OneDnnPathMatchesReference) {
  Rng rng(7);
  for (WeightFormat format :
       {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    for (auto [m, n, k] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 33, 64}, {17, 300, 96}, {129, 31, 1056}}) {
      const TestWeights w = MakeWeights(format, n, k, rng);
      const std::vector<float> x = rng.Normal(m * k);
      std::vector<float> y(static_cast<size_t>(m * n));
      MatmulWithAlgo(MatmulAlgo::kOneDnn, w.view, x.data(), m, y.data());
      EXPECT_TRUE(CloseToReference(y, w, x, m, kF32Accumulation))
          << "format " << static_cast<int>(format) << " m=" << m << " n=" << n << " k=" << k;
    }
  }
}

// bf16 weights read in place, MXFP4 weights decoded to bf16 rows first (m = 1 and 7 too: the
// decode is not only for many rows here).
TEST(CpuMatmulTest, LossyBf16DotIsWithinBf16ActivationTolerance) {
  if (!MatmulAlgoSupported(MatmulAlgo::kBf16DotLossy, WeightFormat::kBf16)) {
    GTEST_SKIP() << "no AVX512_BF16 here";
  }
  Rng rng(8);
  for (WeightFormat format : {WeightFormat::kBf16, WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    const bool mxfp4 = format != WeightFormat::kBf16;  // k a multiple of 32
    const auto* shapes = mxfp4 ? kMxfp4ShapesNK : kShapesNK;
    const size_t num_shapes = mxfp4 ? std::size(kMxfp4ShapesNK) : std::size(kShapesNK);
    for (size_t s = 0; s < num_shapes; ++s) {
      const int64_t n = shapes[s][0], k = shapes[s][1];
      const TestWeights w = MakeWeights(format, n, k, rng);
      for (int64_t m : {int64_t{1}, int64_t{7}, int64_t{64}}) {
        const std::vector<float> x = rng.Normal(m * k);
        std::vector<float> y(static_cast<size_t>(m * n));
        MatmulWithAlgo(MatmulAlgo::kBf16DotLossy, w.view, x.data(), m, y.data());
        EXPECT_TRUE(CloseToReference(y, w, x, m, kBf16Activations))
            << "mxfp4 " << mxfp4 << " m=" << m << " n=" << n << " k=" << k;
      }
    }
  }
}

// MatmulPrecision::kBf16 (opt-in): bf16 and MXFP4 weights and at least kBf16MinRows rows take
// the bf16 products (the AMX tiles' result on AMX CPUs, else the lossy tiles': within the
// bf16-activation bound, not the f32 result); fewer rows, f32 weights and CPUs without
// AVX512_BF16 keep the exact path.
TEST(CpuMatmulTest, Bf16PrecisionRoundsActivationsFromMinRowsOnly) {
  if (!Bf16MatmulSupported()) GTEST_SKIP() << "no AVX512_BF16 here";
  Rng rng(21);
  const int64_t n = 97, k = 1056;
  for (WeightFormat format :
       {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    const TestWeights w = MakeWeights(format, n, k, rng);
    for (int64_t m : {int64_t{1}, kBf16MinRows - 1, kBf16MinRows, int64_t{63}, int64_t{67}}) {
      const std::vector<float> x = rng.Normal(m * k);
      std::vector<float> exact(static_cast<size_t>(m * n)), y(exact.size()), lossy(exact.size());
      Matmul(w.view, x.data(), m, exact.data());
      {
        testing::PrecisionScope bf16(MatmulPrecision::kBf16);
        Matmul(w.view, x.data(), m, y.data());
      }
      const std::string what =
          "format " + std::to_string(static_cast<int>(format)) + " m=" + std::to_string(m);
      if (format != WeightFormat::kF32 && m >= kBf16MinRows) {
        MatmulWithAlgo(testing::Bf16ProductsAlgo(), w.view, x.data(), m, lossy.data());
        EXPECT_EQ(y, lossy) << what;
        EXPECT_NE(y, exact) << what;
        EXPECT_TRUE(CloseToReference(y, w, x, m, kBf16Activations)) << what;
      } else {
        EXPECT_EQ(y, exact) << what;
      }
    }
  }
  IsaCap cap(Isa::kAvx512);  // no BF16 instructions: exact whatever the precision
  const TestWeights w = MakeWeights(WeightFormat::kBf16, n, k, rng);
  const std::vector<float> x = rng.Normal(32 * k);
  std::vector<float> exact(static_cast<size_t>(32 * n)), y(exact.size());
  Matmul(w.view, x.data(), 32, exact.data());
  testing::PrecisionScope bf16(MatmulPrecision::kBf16);
  Matmul(w.view, x.data(), 32, y.data());
  EXPECT_EQ(y, exact);
}

// oneDNN's bf16 products (AMX where present) over odd shapes and m across its pieces: 1, primes,
// a multiple of 16, one row past a 256-row piece, several pieces with a padded last one.
TEST(CpuMatmulTest, OneDnnBf16IsWithinBf16ActivationToleranceOnOddShapes) {
  if (!MatmulAlgoSupported(MatmulAlgo::kOneDnnBf16, WeightFormat::kBf16)) {
    GTEST_SKIP() << "no AVX512_BF16 here";
  }
  Rng rng(22);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 1}, {31, 33}, {97, 1000}, {257, 31}}) {
    const TestWeights w = MakeWeights(WeightFormat::kBf16, n, k, rng);
    for (int64_t m : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{257}, int64_t{531}}) {
      const std::vector<float> x = rng.Normal(m * k);
      std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
      MatmulWithAlgo(MatmulAlgo::kOneDnnBf16, w.view, x.data(), m, y.data());
      EXPECT_TRUE(CloseToReference(y, w, x, m, kBf16Activations))
          << "m=" << m << " n=" << n << " k=" << k;
    }
  }
}

// The AMX tiles over odd shapes: n, k of 1, primes and non-multiples of the tile (16 rows, 32 k),
// m across the 32-row blocks.
// Against the f64 product of x rounded to bf16 within f32 accumulation's bound (a missing or
// doubled product fails it); nothing written outside y.
TEST(CpuMatmulTest, AmxBf16EqualsBf16RoundedProductOnOddShapes) {
  if (!MatmulAlgoSupported(MatmulAlgo::kAmxBf16, WeightFormat::kBf16)) {
    GTEST_SKIP() << "no AMX-BF16 here";
  }
  Rng rng(23);
  // MXFP4 and int8 rows are decoded to bf16 into the tile buffer: k a multiple of 32 there.
  for (auto [format, n, k] : {std::tuple<WeightFormat, int64_t, int64_t>{WeightFormat::kBf16, 1, 1},
                              {WeightFormat::kBf16, 31, 33},
                              {WeightFormat::kBf16, 33, 256},
                              {WeightFormat::kBf16, 97, 1000},
                              {WeightFormat::kBf16, 257, 31},
                              {WeightFormat::kBf16, 48, 2304},
                              {WeightFormat::kMxfp4, 1, 32},
                              {WeightFormat::kMxfp4, 33, 96},
                              {WeightFormat::kMxfp4, 97, 1056},
                              {WeightFormat::kInt8, 1, 32},
                              {WeightFormat::kInt8, 33, 96},
                              {WeightFormat::kInt8, 97, 1056}}) {
    const TestWeights exact = MakeWeights(format, n, k, rng);
    // Int8 weights are rounded to bf16 on their way to the tiles: the product to match is the
    // one with those rounded weights (the others decode exactly, rounding changes nothing).
    const TestWeights w = testing::RoundedToBf16(exact);
    for (int64_t m : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{17}, int64_t{33}, int64_t{257},
                      int64_t{1031}}) {
      if (m * n * k > (int64_t{1} << 27)) continue;  // the f64 reference's time
      std::vector<float> x = rng.Normal(m * k);
      for (float& v : x) v = Bf16ToF32(F32ToBf16(v));  // the rounding the product applies
      const float guard = 12345.0f;
      std::vector<float> y(static_cast<size_t>((m + 1) * n), guard);
      MatmulWithAlgo(MatmulAlgo::kAmxBf16, exact.view, x.data(), m, y.data());
      const std::vector<float> tail(y.begin() + m * n, y.end());
      y.resize(static_cast<size_t>(m * n));
      EXPECT_TRUE(CloseToReference(y, w, x, m, kF32Accumulation))
          << "format " << static_cast<int>(format) << " m=" << m << " n=" << n << " k=" << k;
      EXPECT_EQ(tail, std::vector<float>(static_cast<size_t>(n), guard)) << "m=" << m;
    }
  }
}

// A product big enough for every thread (many 32-row blocks of W, ~1 ms of AMX work) gives the
// same bits on one thread and on three.
TEST(CpuMatmulTest, AmxBf16ResultDoesNotDependOnThreadCount) {
  if (!MatmulAlgoSupported(MatmulAlgo::kAmxBf16, WeightFormat::kBf16)) {
    GTEST_SKIP() << "no AMX-BF16 here";
  }
  const int saved = omp_get_max_threads();
  Rng rng(24);
  const int64_t m = 515, n = 2021, k = 1000;
  const TestWeights w = MakeWeights(WeightFormat::kBf16, n, k, rng);
  const std::vector<float> x = rng.Normal(m * k);
  std::vector<float> one(static_cast<size_t>(m * n)), many(one.size());
  omp_set_num_threads(1);
  MatmulWithAlgo(MatmulAlgo::kAmxBf16, w.view, x.data(), m, one.data());
  for (int threads : {2, 3, 2, 3}) {  // repeated: whether a worker wakes in time varies
    omp_set_num_threads(threads);
    std::fill(many.begin(), many.end(), -1.0f);
    MatmulWithAlgo(MatmulAlgo::kAmxBf16, w.view, x.data(), m, many.data());
    EXPECT_EQ(one, many) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(CpuMatmulTest, ScalarIsaFallsBackToTheReference) {
  IsaCap cap(Isa::kScalar);
  Rng rng(9);
  const TestWeights w = MakeWeights(WeightFormat::kBf16, 19, 45, rng);
  const std::vector<float> x = rng.Normal(3 * 45);
  std::vector<float> y(3 * 19);
  Matmul(w.view, x.data(), 3, y.data());
  EXPECT_EQ(y, Reference(w, x, 3));
}

TEST(CpuMatmulTest, EmptyInnerDimensionGivesZeros) {
  const float unused = 0.0f;
  const MatmulWeights w{WeightFormat::kF32, 5, 0, &unused, nullptr};
  std::vector<float> y(10, 7.0f);
  Matmul(w, &unused, 2, y.data());
  EXPECT_EQ(y, std::vector<float>(10, 0.0f));
}

}  // namespace
}  // namespace strata::kernels::cpu
