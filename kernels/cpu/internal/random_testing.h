// Seeded normal fills for the CPU kernel tests (*_test.cc only; one definition for every test
// source, which a unity build compiles as one translation unit).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace strata::kernels::cpu::internal {

// n values from N(0, stddev²).
inline std::vector<float> Normal(std::mt19937& rng, int64_t n, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace strata::kernels::cpu::internal
