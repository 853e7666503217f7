#include "kernels/cpu/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/internal/isa_testing.h"
#include "kernels/cpu/internal/random_testing.h"

namespace strata::kernels::cpu {
namespace {

using internal::IsaCap;
using internal::SupportedIsas;

const int64_t kSizes[] = {1, 2, 3, 7, 15, 16, 17, 31, 33, 97, 1000, 4099, 20011};

using internal::Normal;

// Values on a coarse grid: many exact ties.
std::vector<float> Coarse(std::mt19937& rng, int64_t n, int levels) {
  std::uniform_int_distribution<int> dist(0, levels - 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(dist(rng)) * 0.5f - 3.0f;
  return v;
}

std::string Where(Isa isa, int64_t n) {
  return std::string(IsaName(isa)) + " n=" + std::to_string(n);
}

TEST(CpuSamplingTest, MaxAndArgmaxAgreeWithMaxElementIncludingTies) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(7);
    for (int64_t n : kSizes) {
      for (const std::vector<float>& x : {Normal(rng, n), Coarse(rng, n, 4)}) {
        const auto it = std::max_element(x.begin(), x.end());
        EXPECT_EQ(Max(x.data(), n), *it) << Where(isa, n);
        EXPECT_EQ(Argmax(x.data(), n), it - x.begin()) << Where(isa, n);
      }
      std::vector<float> x = Normal(rng, n);
      x[n - 1] = 100.0f;  // the maximum in the ragged tail
      EXPECT_EQ(Argmax(x.data(), n), n - 1) << Where(isa, n);
      x[n / 2] = 100.0f;  // a tie: the lower index
      EXPECT_EQ(Argmax(x.data(), n), n / 2) << Where(isa, n);
    }
  }
}

TEST(CpuSamplingTest, LogSumExpAndTailSumsMatchF64) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(8);
    for (int64_t n : kSizes) {
      const std::vector<float> x = Coarse(rng, n, 16);
      const double max = *std::max_element(x.begin(), x.end());
      double total = 0;
      for (float v : x) total += std::exp(v - max);
      // f32 exp (≤ 2 ulp) summed in f32 blocks of 1024: relative error ≲ 1e-6.
      EXPECT_NEAR(LogSumExp(x.data(), n), max + std::log(total), 2e-6) << Where(isa, n);
      const float below = -1.0f, shift = 0.5f, scale = 1.7f;
      double sum = 0;
      int64_t equal = 0;
      for (float v : x) {
        if (v < below) sum += std::exp((double(v) - shift) * scale);
        equal += v == below;
      }
      const ExpSum got = SumExpBelow(x.data(), n, shift, scale, below);
      EXPECT_NEAR(got.sum, sum, 2e-6 * sum) << Where(isa, n);
      EXPECT_EQ(got.num_equal, equal) << Where(isa, n);
    }
    const float tiny[] = {-std::numeric_limits<float>::infinity(), 0.0f, -200.0f};
    EXPECT_DOUBLE_EQ(SumExpBelow(tiny, 3, 0.0f, 1.0f, 1.0f).sum, 1.0) << IsaName(isa);
  }
}

TEST(CpuSamplingTest, ExpShiftedIsTheF32ExpOfEveryElement) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(9);
    for (int64_t n : kSizes) {
      std::vector<float> x = Coarse(rng, n, 16);
      if (n > 2) x[1] = kNan;
      if (n > 3) x[n - 2] = -kInf;
      const float shift = 0.5f, scale = 1.3f;
      std::vector<float> out(static_cast<size_t>(n) + 1, 7.0f);  // the extra one stays 7
      ExpShifted(x.data(), n, shift, scale, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::isnan(x[i]) ? 0.0 : std::exp((double(x[i]) - shift) * scale);
        EXPECT_NEAR(out[i], want, 3e-7 * want) << Where(isa, n) << " i " << i;
      }
      EXPECT_EQ(out[n], 7.0f) << Where(isa, n);
    }
  }
}

// The first k of a full sort by Better.
std::vector<int32_t> SortedIds(const std::vector<float>& x, int64_t k) {
  std::vector<ScoredId> all;
  for (size_t i = 0; i < x.size(); ++i) all.push_back({x[i], static_cast<int32_t>(i)});
  std::sort(all.begin(), all.end(), Better);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < k; ++i) ids.push_back(all[i].id);
  return ids;
}

TEST(CpuSamplingTest, TopKEqualsThePrefixOfAFullSortIncludingTies) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(9);
    for (int64_t n : kSizes) {
      for (const std::vector<float>& x : {Normal(rng, n), Coarse(rng, n, 5)}) {
        for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{5}, n / 3, n / 2 + 1, n}) {
          if (k < 1 || k > n) continue;
          std::vector<ScoredId> scratch(static_cast<size_t>(TopKScratchSize(k)));
          TopK(x.data(), n, k, scratch.data());
          std::vector<int32_t> ids;
          for (int64_t i = 0; i < k; ++i) {
            ids.push_back(scratch[i].id);
            ASSERT_EQ(scratch[i].value, x[scratch[i].id]);
          }
          EXPECT_EQ(ids, SortedIds(x, k)) << Where(isa, n) << " k=" << k;
        }
      }
    }
  }
}

TEST(CpuSamplingTest, TopKNeverRanksNanAboveANumber) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(10);
    std::vector<float> x = Normal(rng, 500);
    for (int i : {0, 3, 77, 250, 499}) x[i] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> numbers = x;
    for (float& v : numbers) v = std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
    std::vector<ScoredId> scratch(static_cast<size_t>(TopKScratchSize(20)));
    TopK(x.data(), 500, 20, scratch.data());
    std::vector<int32_t> ids;
    for (int i = 0; i < 20; ++i) ids.push_back(scratch[i].id);
    EXPECT_EQ(ids, SortedIds(numbers, 20)) << IsaName(isa);
  }
}

TEST(CpuSamplingTest, PenaltiesMatchTheScalarFormulasExactly) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> coin(0, 3);
    for (int64_t n : kSizes) {
      const std::vector<float> x = Normal(rng, n, 3.0f);
      std::vector<uint8_t> seen(static_cast<size_t>(n));
      std::vector<int32_t> counts(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        seen[i] = coin(rng) == 0;
        counts[i] = coin(rng) == 0 ? coin(rng) + 1 : 0;
      }
      std::vector<float> rep = x, rep_want = x, freq = x, freq_want = x;
      for (int64_t i = 0; i < n; ++i) {
        if (seen[i]) rep_want[i] = x[i] > 0 ? x[i] / 1.3f : x[i] * 1.3f;
        if (counts[i] > 0) freq_want[i] -= std::fma(static_cast<float>(counts[i]), 0.3f, 0.7f);
      }
      ApplyRepetitionPenalty(rep.data(), seen.data(), n, 1.3f);
      ApplyPresenceFrequencyPenalty(freq.data(), counts.data(), n, 0.7f, 0.3f);
      EXPECT_EQ(rep, rep_want) << Where(isa, n);
      EXPECT_EQ(freq, freq_want) << Where(isa, n);
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cpu
