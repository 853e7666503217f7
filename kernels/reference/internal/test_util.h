// Test helpers for the reference-kernel tests: seeded random fills and an element-wise closeness
// assertion that reports the worst element. Test-only; include from *_test.cc files.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace strata::kernels::testing {

// σ(x) in f64, written out (the tests' independent value).
inline double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

class Rng {
 public:
  explicit Rng(uint32_t seed) : engine_(seed) {}

  std::vector<float> Normal(size_t n, float stddev = 1.0f) {
    std::normal_distribution<float> dist(0.0f, stddev);
    std::vector<float> out(n);
    for (float& v : out) v = dist(engine_);
    return out;
  }
  std::vector<float> Uniform(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> out(n);
    for (float& v : out) v = dist(engine_);
    return out;
  }

 private:
  std::mt19937 engine_;
};

// Every |actual[i] − expected[i]| ≤ atol + rtol·|expected[i]|; on failure names the worst index.
inline ::testing::AssertionResult AllClose(const std::vector<float>& actual,
                                           const std::vector<float>& expected, double rtol,
                                           double atol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  }
  int64_t worst = -1;
  double worst_excess = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    const double excess = diff - (atol + rtol * std::fabs(static_cast<double>(expected[i])));
    if (!(excess <= 0.0) && (worst < 0 || !(excess <= worst_excess))) {
      worst = static_cast<int64_t>(i);
      worst_excess = excess;
    }
  }
  if (worst < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst << ": " << actual[worst] << " vs expected " << expected[worst]
         << " (rtol " << rtol << ", atol " << atol << ")";
}

// max_i |a[i]| (scale for relative comparisons of whole tensors).
inline double MaxAbs(const std::vector<float>& a) {
  double m = 0.0;
  for (float v : a) m = std::fmax(m, std::fabs(static_cast<double>(v)));
  return m;
}

inline bool AllFinite(const std::vector<float>& a) {
  for (float v : a) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

}  // namespace strata::kernels::testing
