// Scalar helpers shared by the reference kernels: numerically safe activations and f64 dot
// products with a fixed summation order. Internal to kernels/reference.
#pragma once

#include <cmath>
#include <cstdint>

namespace strata::kernels::internal {

// σ(x) without overflow for any |x|: exp is only taken of −|x| ≤ 0.
inline double Sigmoid(double x) {
  if (x >= 0.0) {
    return 1.0 / (1.0 + std::exp(-x));
  }
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// softplus(x) = log(1 + eˣ) = max(x, 0) + log1p(e^−|x|): no overflow, exact tail for x ≪ 0.
inline double Softplus(double x) { return std::fmax(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }

// SiLU(x) = x·σ(x).
inline double Silu(double x) { return x * Sigmoid(x); }

// Dot products accumulate in f64 in a FIXED order, independent of compiler flags: element i goes
// to lane i % 8 while whole groups of 8 remain, lanes are combined as
// ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)), then the tail (i ≥ 8·⌊n/8⌋) is added in order.
// DotF64 and DotF64x4 give bit-identical results for the same operands.
inline constexpr int kDotLanes = 8;

inline double CombineLanes(const double* lane) {
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

inline double DotF64(const float* a, const float* b, int64_t n) {
  double lane[kDotLanes] = {};
  int64_t i = 0;
  for (; i + kDotLanes <= n; i += kDotLanes) {
    for (int l = 0; l < kDotLanes; ++l) {
      lane[l] += static_cast<double>(a[i + l]) * static_cast<double>(b[i + l]);
    }
  }
  double sum = CombineLanes(lane);
  for (; i < n; ++i) {
    sum += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  }
  return sum;
}

// out[c] = DotF64(a, b[c], n) for c = 0..3, sharing the loads of `a`.
inline void DotF64x4(const float* a, const float* const b[4], int64_t n, double out[4]) {
  double lane[4][kDotLanes] = {};
  int64_t i = 0;
  for (; i + kDotLanes <= n; i += kDotLanes) {
    for (int l = 0; l < kDotLanes; ++l) {
      const double av = static_cast<double>(a[i + l]);
      for (int c = 0; c < 4; ++c) {
        lane[c][l] += av * static_cast<double>(b[c][i + l]);
      }
    }
  }
  for (int c = 0; c < 4; ++c) {
    double sum = CombineLanes(lane[c]);
    for (int64_t t = i; t < n; ++t) {
      sum += static_cast<double>(a[t]) * static_cast<double>(b[c][t]);
    }
    out[c] = sum;
  }
}

// Σ a[i]² in f64 (same order as DotF64(a, a, n)).
inline double SumSquaresF64(const float* a, int64_t n) { return DotF64(a, a, n); }

}  // namespace strata::kernels::internal
