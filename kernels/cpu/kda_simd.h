// Internal to the KDA CPU kernels (kda_decode.cc, kda_chunk.cc): portable SIMD over W f32 lanes
// written with GCC vector extensions, and the per-head element-wise steps of a KDA layer.
//
// One source serves both ISA paths: every function here is always_inline and has no target
// attribute, so it compiles to zmm code when inlined into a STRATA_TARGET_AVX512 entry point
// (W = 16) and to ymm code in the x86-64-v3 baseline (W = 8; W = 1 for column tails). The files
// that include this header are compiled with -ffp-contract=fast (kernels/cpu/CMakeLists.txt), so
// a·b + c becomes one FMA on both paths.
//
// Accuracy (f32, relative to f64 math, checked in kda_test.cc): Exp ≤ 2 ulp on [−87.3, 88.3],
// Log1pUnit ≤ 2 ulp on [0, 1], Sigmoid and Softplus ≤ 3 ulp.
#pragma once

// 64-byte vectors are only ever passed between always_inline functions, never across an ABI
// boundary, so GCC's note that their calling convention differs between ISAs does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/tensor.h"
#include "kernels/cpu/kda_layer.h"

#define KDA_INLINE __attribute__((always_inline)) inline

namespace strata::kernels::cpu::kda {

template <int W>
struct VecTypes {
  typedef float F __attribute__((vector_size(4 * W)));
  typedef int32_t I __attribute__((vector_size(4 * W)));
};
template <int W>
using VF = typename VecTypes<W>::F;
template <int W>
using VI = typename VecTypes<W>::I;

// Lanes per vector of the padded layouts: every padded row length is a multiple of this, which
// is a multiple of both ISA widths.
constexpr int64_t kPad = 16;
inline int64_t PadTo16(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

template <int W>
KDA_INLINE VF<W> Load(const float* p) {
  VF<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <int W>
KDA_INLINE void Store(float* p, const VF<W>& v) {
  std::memcpy(p, &v, sizeof v);
}
template <int W>
KDA_INLINE VF<W> Splat(float x) {
  return VF<W>{} + x;
}
template <int W>
KDA_INLINE VF<W> Min(const VF<W>& a, const VF<W>& b) {
  return a < b ? a : b;
}
template <int W>
KDA_INLINE VF<W> Max(const VF<W>& a, const VF<W>& b) {
  return a > b ? a : b;
}
template <int W>
KDA_INLINE float ReduceAdd(const VF<W>& v) {
  if constexpr (W == 1) {
    return v[0];
  } else {
    // Pairwise tree: halves added lane by lane until one lane is left.
    VF<W / 2> lo, hi;
    std::memcpy(&lo, &v, sizeof lo);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return ReduceAdd<W / 2>(lo + hi);
  }
}

// e^x (Cephes expf: Cody–Waite reduction by ln 2, degree-6 polynomial, 2^n from the exponent
// bits). Results below the smallest normal are returned as 0; x above ln(2^127·1.5) is clamped
// there (2^n must stay finite), so the largest result is ≈ 2.5e38, never inf.
template <int W>
KDA_INLINE VF<W> Exp(const VF<W>& x_in) {
  constexpr float kLo = -87.33654f, kHi = 88.3762626647949f;
  const VF<W> x = Min<W>(Max<W>(x_in, Splat<W>(kLo)), Splat<W>(kHi));
  const VF<W> shifted = x * 1.44269504088896341f + 12582912.0f;  // round(x / ln 2) + 1.5·2^23
  const VI<W> n_int = std::bit_cast<VI<W>>(shifted) - 0x4B400000;
  const VF<W> n = shifted - 12582912.0f;
  VF<W> r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  VF<W> p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const VI<W> scale_bits = (n_int + 127) << 23;
  const VF<W> result = p * std::bit_cast<VF<W>>(scale_bits);
  return x_in < kLo ? VF<W>{} : result;
}

// log(1 + u) for u in [0, 1] (Cephes logf polynomial on the reduced argument, without forming
// 1 + u, so small u keeps full relative precision).
template <int W>
KDA_INLINE VF<W> Log1pUnit(const VF<W>& u) {
  const auto big = u > 0.41421356f;  // 1 + u > √2: log(1+u) = ln 2 + log1p((u − 1) / 2)
  const VF<W> x = big ? (u - 1.0f) * 0.5f : u;
  const VF<W> e = big ? Splat<W>(1.0f) : VF<W>{};
  const VF<W> z = x * x;
  VF<W> y = 7.0376836292e-2f * x - 1.1514610310e-1f;
  y = y * x + 1.1676998740e-1f;
  y = y * x - 1.2420140846e-1f;
  y = y * x + 1.4249322787e-1f;
  y = y * x - 1.6668057665e-1f;
  y = y * x + 2.0000714765e-1f;
  y = y * x - 2.4999993993e-1f;
  y = y * x + 3.3333331174e-1f;
  y = y * x * z;
  y = y + e * -2.12194440e-4f;
  y = y - 0.5f * z;
  return x + y + e * 0.693359375f;
}

template <int W>
KDA_INLINE VF<W> Sigmoid(const VF<W>& x) {
  return 1.0f / (1.0f + Exp<W>(-x));
}
template <int W>
KDA_INLINE VF<W> Silu(const VF<W>& x) {
  return x / (1.0f + Exp<W>(-x));
}
// log(1 + e^x) = max(x, 0) + log1p(e^−|x|).
template <int W>
KDA_INLINE VF<W> Softplus(const VF<W>& x) {
  const VF<W> neg_abs = x < 0.0f ? x : -x;
  return Max<W>(x, VF<W>{}) + Log1pUnit<W>(Exp<W>(neg_abs));
}

// ---- per-head element-wise steps; every length is a padded multiple of W ----

// Per-channel parameters of one head, laid out for vector access (built once per head).
struct HeadParams {
  const float* conv_t[3];  // q, k, v taps transposed: [K, Dp], tap K−1 multiplies the newest row
  const float* dt_bias;    // [Dp] (padded with 0)
  const float* o_norm;     // [Dp] (padded with 0)
  float decay_scale;       // exp(A_log[h])
};

// The calling thread's scratch for kernel `kTag` (one buffer per kernel and thread): `count`
// floats, 64-byte aligned, contents unspecified. The buffer only grows, so steady-state calls do
// not touch the heap.
template <int kTag>
float* ThreadScratch(int64_t count) {
  thread_local AlignedBuffer buffer;
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  if (buffer.size() < bytes) buffer = AlignedBuffer(bytes + bytes / 4);
  return buffer.as<float>();
}

// dst[0, dp) = src[0, d) followed by zeros.
inline void CopyPadded(float* dst, const float* src, int64_t d, int64_t dp) {
  std::memcpy(dst, src, static_cast<size_t>(d) * sizeof(float));
  std::memset(dst + d, 0, static_cast<size_t>(dp - d) * sizeof(float));
}

// Floats PrepareHeadParams needs: conv taps [3, K, Dp], dt_bias [Dp], o_norm [Dp].
inline int64_t HeadParamsFloats(int kernel, int64_t dp) { return (3 * kernel + 2) * dp; }

// Head h's parameters, padded with zeros to dp channels, in `buf` (HeadParamsFloats floats).
inline HeadParams PrepareHeadParams(const KdaLayerParams& p, int h, int64_t dp, float* buf) {
  const int64_t d = p.head_dim, kernel = p.conv_kernel_size;
  std::memset(buf, 0, static_cast<size_t>(HeadParamsFloats(p.conv_kernel_size, dp)) * 4);
  HeadParams hp{};
  const float* taps[3] = {p.q_conv, p.k_conv, p.v_conv};
  for (int w = 0; w < 3; ++w) {
    float* t = buf + w * kernel * dp;
    for (int64_t c = 0; c < d; ++c) {
      for (int64_t j = 0; j < kernel; ++j) t[j * dp + c] = taps[w][(h * d + c) * kernel + j];
    }
    hp.conv_t[w] = t;
  }
  float* dt_bias = buf + 3 * kernel * dp;
  float* o_norm = dt_bias + dp;
  std::memcpy(dt_bias, p.dt_bias + h * d, static_cast<size_t>(d) * 4);
  std::memcpy(o_norm, p.o_norm, static_cast<size_t>(d) * 4);
  hp.dt_bias = dt_bias;
  hp.o_norm = o_norm;
  hp.decay_scale = std::exp(p.a_log[h]);
  return hp;
}

// β = σ(b) for one (token, head), f32.
inline float Beta(float b) { return 1.0f / (1.0f + std::exp(-b)); }

// y[c] = SiLU(Σ_j taps[j][c] · rows[j][c]) over dp channels; rows[K−1] is the newest input.
template <int W>
KDA_INLINE void ConvSilu(const float* const* rows, const float* taps, int kernel, int64_t dp,
                         float* y) {
  for (int64_t c = 0; c < dp; c += W) {
    VF<W> acc = Load<W>(taps + c) * Load<W>(rows[0] + c);
    for (int j = 1; j < kernel; ++j) acc = acc + Load<W>(taps + j * dp + c) * Load<W>(rows[j] + c);
    Store<W>(y + c, Silu<W>(acc));
  }
}

// x ← x · scale / sqrt(Σ x² + eps) over dp channels (pad lanes are 0 and stay 0).
template <int W>
KDA_INLINE void L2Normalize(float* x, int64_t dp, float eps, float scale) {
  VF<W> ss{};
  for (int64_t c = 0; c < dp; c += W) ss = ss + Load<W>(x + c) * Load<W>(x + c);
  const float factor = scale / __builtin_sqrtf(ReduceAdd<W>(ss) + eps);
  for (int64_t c = 0; c < dp; c += W) Store<W>(x + c, Load<W>(x + c) * factor);
}

// Log decay g = lb·σ(a·(f + dt_bias)) (bounded K3 gate) or −a·softplus(f + dt_bias)
// (Kimi-Linear), a = exp(A_log[h]). Pad lanes (dt_bias 0, f 0) are overwritten with 0.
template <int W>
KDA_INLINE void LogDecay(const float* f, const HeadParams& hp, bool bounded, float lower_bound,
                         int64_t d, int64_t dp, float* g) {
  for (int64_t c = 0; c < dp; c += W) {
    const VF<W> z = Load<W>(f + c) + Load<W>(hp.dt_bias + c);
    const VF<W> v =
        bounded ? lower_bound * Sigmoid<W>(hp.decay_scale * z) : -hp.decay_scale * Softplus<W>(z);
    Store<W>(g + c, v);
  }
  for (int64_t c = d; c < dp; ++c) g[c] = 0.0f;
}

// y[c] = o[c] · rsqrt(mean_{c<d} o² + eps) · o_norm[c] · σ(gate[c]); o is padded with 0.
template <int W>
KDA_INLINE void GatedRmsNorm(const float* o, const float* gate, const float* o_norm, int64_t d,
                             int64_t dp, float eps, float* y) {
  VF<W> ss{};
  for (int64_t c = 0; c < dp; c += W) ss = ss + Load<W>(o + c) * Load<W>(o + c);
  const float inv_rms = 1.0f / __builtin_sqrtf(ReduceAdd<W>(ss) / static_cast<float>(d) + eps);
  for (int64_t c = 0; c < dp; c += W) {
    const VF<W> v = Load<W>(o + c) * inv_rms * Load<W>(o_norm + c) * Sigmoid<W>(Load<W>(gate + c));
    Store<W>(y + c, v);
  }
}

}  // namespace strata::kernels::cpu::kda
