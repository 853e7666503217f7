#include "kernels/cpu/rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/internal/isa_testing.h"
#include "kernels/cpu/internal/random_testing.h"
#include "kernels/reference/rms_norm.h"

namespace strata::kernels::cpu {
namespace {

using internal::IsaCap;
using internal::SupportedIsas;

// f32 sums of squares over ≤ 10⁴ elements: relative error ~1e-6; 1e-5 leaves headroom and
// still catches a wrong element, scale or row (errors of order 1).
constexpr double kRelTol = 1e-5;

using internal::Normal;

::testing::AssertionResult Close(const std::vector<float>& y, const std::vector<float>& ref) {
  for (size_t i = 0; i < y.size(); ++i) {
    const double err = std::fabs(double(y[i]) - ref[i]);
    if (!(err <= kRelTol * std::fabs(ref[i]) + 1e-7)) {
      return ::testing::AssertionFailure()
             << "y[" << i << "] = " << y[i] << ", reference " << ref[i];
    }
  }
  return ::testing::AssertionSuccess();
}

const int64_t kDims[] = {1, 2, 7, 13, 16, 17, 31, 97, 1000, 7168};
const int64_t kRows[] = {1, 3, 5};

TEST(CpuRmsNormTest, MatchesReferenceOnOddSizesOnEveryIsa) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(1);
    for (int64_t dim : kDims) {
      for (int64_t rows : kRows) {
        const std::vector<float> x = Normal(rng, rows * dim, 3.0f), w = Normal(rng, dim);
        for (const float* weight : {w.data(), static_cast<const float*>(nullptr)}) {
          std::vector<float> y(x.size()), ref(x.size());
          RmsNorm(x.data(), rows, dim, weight, 1e-5f, y.data());
          RmsNormReference(x.data(), rows, dim, weight, 1e-5f, ref.data());
          EXPECT_TRUE(Close(y, ref))
              << IsaName(isa) << " rows " << rows << " dim " << dim << (weight ? "" : " no weight");
        }
        std::vector<float> in_place = x, ref(x.size());
        RmsNorm(in_place.data(), rows, dim, w.data(), 1e-6f, in_place.data());
        RmsNormReference(x.data(), rows, dim, w.data(), 1e-6f, ref.data());
        EXPECT_TRUE(Close(in_place, ref)) << IsaName(isa) << " in place, dim " << dim;
      }
    }
  }
}

TEST(CpuRmsNormTest, FusedAddUpdatesTheResidualAndNormalisesTheSum) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(2);
    // 64 × 1031 rows also takes the OpenMP path.
    for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 1}, {3, 17}, {2, 97}, {64, 1031}}) {
      const std::vector<float> h0 = Normal(rng, rows * dim), a = Normal(rng, rows * dim),
                               w = Normal(rng, dim);
      std::vector<float> sum(h0.size()), ref(h0.size()), y(h0.size());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = h0[i] + a[i];
      RmsNormReference(sum.data(), rows, dim, w.data(), 1e-5f, ref.data());
      std::vector<float> h = h0;
      AddRmsNorm(h.data(), a.data(), rows, dim, w.data(), 1e-5f, y.data());
      EXPECT_EQ(h, sum) << IsaName(isa) << " dim " << dim;  // one f32 add per element: exact
      EXPECT_TRUE(Close(y, ref)) << IsaName(isa) << " rows " << rows << " dim " << dim;
      std::vector<float> h2 = h0, a2 = a;  // y aliasing a
      AddRmsNorm(h2.data(), a2.data(), rows, dim, w.data(), 1e-5f, a2.data());
      EXPECT_EQ(a2, y) << IsaName(isa) << " y aliasing a, dim " << dim;
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cpu
