// Test helpers shared by the matmul tests: random operands, weights in every format with their
// exact f32 values, the f64 reference products, the ISA paths this CPU has.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/int8_quantize.h"
#include "kernels/cpu/internal/isa_testing.h"
#include "kernels/cpu/matmul.h"
#include "kernels/reference/matmul.h"

namespace strata::kernels::cpu::testing {

// Error bound per output: |y − y_ref| ≤ (fixed + per_sqrt_k·√k) · Σ_p |x_p·w_p|.
// f32 accumulation of k products in blocks: the rounding error is a few ulps (2^-24 ≈ 6e-8)
// times √k·Σ|x·w| at worst-typical; per_sqrt_k = 1e-6 leaves ~10× headroom yet catches one
// missing or doubled product (≈ Σ|x·w|/k ≥ 5e-4·Σ for k ≤ 2100, vs a bound ≤ 5e-5·Σ).
// The lossy variant rounds x to bf16 (relative error 2^-9 per product).
struct Tolerance {
  double fixed;
  double per_sqrt_k;
};
constexpr Tolerance kF32Accumulation{0.0, 1e-6};
constexpr Tolerance kBf16Activations{4e-3, 1e-6};

// The products MatmulPrecision::kBf16 runs from kBf16MinRows rows: our AMX tiles on AMX CPUs,
// else the vdpbf16ps tiles.
inline MatmulAlgo Bf16ProductsAlgo() {
  return Bf16MatmulUsesAmx() ? MatmulAlgo::kAmxBf16 : MatmulAlgo::kBf16DotLossy;
}

// Sets the process-wide MatmulPrecision for a scope, restoring the default (kF32) after it.
class PrecisionScope {
 public:
  explicit PrecisionScope(MatmulPrecision p) { SetMatmulPrecision(p); }
  ~PrecisionScope() { SetMatmulPrecision(MatmulPrecision::kF32); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;
};

class Rng {
 public:
  explicit Rng(uint32_t seed) : engine_(seed) {}
  std::vector<float> Normal(int64_t count) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> out(static_cast<size_t>(count));
    for (float& v : out) v = dist(engine_);
    return out;
  }
  std::vector<uint8_t> Bytes(int64_t count, int lo, int hi) {
    std::uniform_int_distribution<int> dist(lo, hi);
    std::vector<uint8_t> out(static_cast<size_t>(count));
    for (uint8_t& v : out) v = static_cast<uint8_t>(dist(engine_));
    return out;
  }

 private:
  std::mt19937 engine_;
};

// A weight matrix in one format plus its exact f32 values (for the error scale).
struct TestWeights {
  MatmulWeights view;
  std::vector<float> f32;       // [n, k], exactly the values the format encodes
  std::vector<uint16_t> bf16;   // storage for kBf16
  std::vector<uint8_t> packed;  // storage for kMxfp4 (codes) and kInt8 (int8 codes)
  std::vector<uint8_t> scales;
  std::vector<uint16_t> int8_scales;  // kInt8's bf16 scales
};

inline TestWeights MakeWeights(WeightFormat format, int64_t n, int64_t k, Rng& rng,
                               int scale_lo = 122, int scale_hi = 130) {
  TestWeights t;
  t.view = {format, n, k, nullptr, nullptr};
  if (format == WeightFormat::kMxfp4) {
    t.packed = rng.Bytes(n * k / 2, 0, 255);
    t.scales = rng.Bytes(n * k / 32, scale_lo, scale_hi);
    t.f32.resize(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < n; ++j) {
      DecodeMxfp4(t.packed.data() + j * k / 2, t.scales.data() + j * k / 32, static_cast<size_t>(k),
                  t.f32.data() + j * k);
    }
    t.view.data = t.packed.data();
    t.view.scales = t.scales.data();
    return t;
  }
  if (format == WeightFormat::kInt8) {
    // Codes over the whole range (−128 too: the kernels take any int8), scales with random
    // mantissas and exponent fields in [scale_lo − 7, scale_hi − 7] (scale_lo ≥ 7), so decoded
    // weights are ~N(0, 1)-sized at the defaults.
    t.packed = rng.Bytes(n * k, 0, 255);
    const std::vector<uint8_t> exponents = rng.Bytes(n * k / 32, scale_lo - 7, scale_hi - 7);
    const std::vector<uint8_t> mantissas = rng.Bytes(n * k / 32, 0, 127);
    t.int8_scales.resize(exponents.size());
    for (size_t g = 0; g < exponents.size(); ++g) {
      t.int8_scales[g] = static_cast<uint16_t>(exponents[g] << 7 | mantissas[g]);
    }
    t.f32.resize(static_cast<size_t>(n * k));
    const auto* codes = reinterpret_cast<const int8_t*>(t.packed.data());
    for (int64_t j = 0; j < n; ++j) {
      DecodeInt8(codes + j * k, t.int8_scales.data() + j * k / 32, static_cast<size_t>(k),
                 t.f32.data() + j * k);
    }
    t.view.data = t.packed.data();
    t.view.scales = reinterpret_cast<const uint8_t*>(t.int8_scales.data());
    return t;
  }
  t.f32 = rng.Normal(n * k);
  if (format == WeightFormat::kBf16) {
    t.bf16.resize(t.f32.size());
    for (size_t i = 0; i < t.f32.size(); ++i) {
      t.bf16[i] = F32ToBf16(t.f32[i]);
      t.f32[i] = Bf16ToF32(t.bf16[i]);
    }
    t.view.data = t.bf16.data();
  } else {
    t.view.data = t.f32.data();
  }
  return t;
}

inline std::vector<float> Reference(const TestWeights& w, const std::vector<float>& x, int64_t m) {
  const MatmulWeights& v = w.view;
  std::vector<float> y(static_cast<size_t>(m * v.n));
  switch (v.format) {
    case WeightFormat::kF32:
      MatmulReference(x.data(), m, v.k, w.f32.data(), v.n, y.data());
      break;
    case WeightFormat::kBf16:
      MatmulBf16Reference(x.data(), m, v.k, w.bf16.data(), v.n, y.data());
      break;
    case WeightFormat::kMxfp4:
      MatmulMxfp4Reference(x.data(), m, v.k, w.packed.data(), w.scales.data(), v.n, y.data());
      break;
    case WeightFormat::kInt8:
      MatmulInt8Reference(x.data(), m, v.k, reinterpret_cast<const int8_t*>(w.packed.data()),
                          w.int8_scales.data(), v.n, y.data());
      break;
  }
  return y;
}

// The same weights' values rounded to bf16 (nearest even), as kBf16 weights.
inline TestWeights RoundedToBf16(const TestWeights& w) {
  TestWeights t;
  t.view = {WeightFormat::kBf16, w.view.n, w.view.k, nullptr, nullptr};
  t.bf16.resize(w.f32.size());
  t.f32.resize(w.f32.size());
  for (size_t i = 0; i < w.f32.size(); ++i) {
    t.bf16[i] = F32ToBf16(w.f32[i]);
    t.f32[i] = Bf16ToF32(t.bf16[i]);
  }
  t.view.data = t.bf16.data();
  return t;
}

inline std::vector<float> Abs(std::vector<float> v) {
  for (float& e : v) e = std::fabs(e);
  return v;
}

// Every output within the tolerance of the f64 reference; on failure names the worst one.
inline ::testing::AssertionResult CloseToReference(const std::vector<float>& y,
                                                   const TestWeights& w,
                                                   const std::vector<float>& x, int64_t m,
                                                   Tolerance tol) {
  const int64_t n = w.view.n, k = w.view.k;
  const std::vector<float> ref = Reference(w, x, m);
  std::vector<float> scale(static_cast<size_t>(m * n));  // Σ|x·w| per output
  MatmulReference(Abs(x).data(), m, k, Abs(w.f32).data(), n, scale.data());
  const double rel = tol.fixed + tol.per_sqrt_k * std::sqrt(static_cast<double>(k));
  for (int64_t e = 0; e < m * n; ++e) {
    const double err = std::fabs(static_cast<double>(y[e]) - ref[e]);
    if (!(err <= rel * scale[e])) {
      return ::testing::AssertionFailure()
             << "y[" << e / n << ", " << e % n << "] = " << y[e] << ", reference " << ref[e]
             << ", error " << err << " > bound " << rel * scale[e];
    }
  }
  return ::testing::AssertionSuccess();
}

using internal::IsaCap;
using internal::SupportedIsas;

inline std::string Describe(Isa isa, int64_t m, int64_t n, int64_t k) {
  return std::string(IsaName(isa)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
         " k=" + std::to_string(k);
}

}  // namespace strata::kernels::cpu::testing
