// Instantiates mla_tiles_impl.h for AVX-512 (per-function target attribute) and for the AVX2
// baseline, each with its vector traits.
#include "kernels/cpu/mla_tiles.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/avx512_intrinsics.h"
#include "core/check.h"
#include "core/tensor.h"
#include "kernels/cpu/internal/simd_exp.h"

namespace strata::kernels::cpu::mla {
namespace {

// e^x: the shared Cephes expf of internal/simd_exp.h (≤ 2 ulp; exactly 0 below −87.33).

namespace avx512 {

#define MLA_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

struct V {
  using Vec = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kDotRows = 4, kDotCols = 4;          // 16 accumulators
  static constexpr int kAxpyQueries = 4, kAxpyVectors = 4;  // 16 accumulators

  MLA_TARGET static __mmask16 Mask(int count) {
    return count >= 16  ? __mmask16(0xFFFF)
           : count <= 0 ? __mmask16(0)
                        : __mmask16((1u << count) - 1);
  }
  MLA_TARGET static Vec Zero() { return _mm512_setzero_ps(); }
  MLA_TARGET static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  MLA_TARGET static Vec LoadPartial(const float* p, int n) {
    return _mm512_maskz_loadu_ps(Mask(n), p);
  }
  MLA_TARGET static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  MLA_TARGET static void StorePartial(float* p, Vec v, int n) {
    _mm512_mask_storeu_ps(p, Mask(n), v);
  }
  MLA_TARGET static Vec Set1(float x) { return _mm512_set1_ps(x); }
  MLA_TARGET static Vec Add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  MLA_TARGET static Vec Sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  MLA_TARGET static Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  MLA_TARGET static Vec Div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
  MLA_TARGET static Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  MLA_TARGET static Vec KeepFirst(Vec v, int n) { return _mm512_maskz_mov_ps(Mask(n), v); }
  // ((l0+l2)+(l1+l3)) within each 128-bit lane, then (L0+L1)+(L2+L3).
  MLA_TARGET static float ReduceAdd(Vec v) {
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
    return _mm512_cvtss_f32(v);
  }
  MLA_TARGET static Vec Exp(Vec x) { return internal::Exp512(x); }
  // sums[e] = Σ lanes of acc[e / 4][e % 4], by a transposing tree.
  MLA_TARGET static void ReduceTile(const Vec (&a)[4][4], float* sums) {
    Vec t[8];
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      const Vec lo = a[q / 2][2 * (q % 2)], hi = a[q / 2][2 * (q % 2) + 1];
      t[q] = _mm512_add_ps(_mm512_unpacklo_ps(lo, hi), _mm512_unpackhi_ps(lo, hi));
    }
    Vec u[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      u[q] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * q], t[2 * q + 1], 0x44),
                           _mm512_shuffle_ps(t[2 * q], t[2 * q + 1], 0xEE));
    }
    const Vec v0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88),
                                 _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
    const Vec v1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88),
                                 _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
    _mm512_storeu_ps(sums, _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x88),
                                         _mm512_shuffle_f32x4(v0, v1, 0xDD)));
  }
};

#include "kernels/cpu/mla_tiles_impl.h"  // NOLINT(build/include)

// After mla_tiles_impl.h: uses its V, SoftmaxStep and kernels.
#include "kernels/cpu/mla_tiles_bf16_impl.h"  // NOLINT(build/include)

#undef MLA_TARGET

}  // namespace avx512

namespace avx2 {

#define MLA_TARGET

struct V {
  using Vec = __m256;
  static constexpr int kWidth = 8;
  static constexpr int kDotRows = 2, kDotCols = 4;          // 8 accumulators (16 ymm registers)
  static constexpr int kAxpyQueries = 4, kAxpyVectors = 2;  // 8 accumulators

  static __m256i Mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Vec Zero() { return _mm256_setzero_ps(); }
  static Vec Load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec LoadPartial(const float* p, int n) { return _mm256_maskload_ps(p, Mask(n)); }
  static void Store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static void StorePartial(float* p, Vec v, int n) { _mm256_maskstore_ps(p, Mask(n), v); }
  static Vec Set1(float x) { return _mm256_set1_ps(x); }
  static Vec Add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec Sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec Mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec Div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec KeepFirst(Vec v, int n) { return _mm256_and_ps(v, _mm256_castsi256_ps(Mask(n))); }
  // ((l0+l2)+(l1+l3)) within each 128-bit lane, then L0+L1.
  static float ReduceAdd(Vec v) {
    v = _mm256_add_ps(v, _mm256_permute_ps(v, 0x4E));
    v = _mm256_add_ps(v, _mm256_permute_ps(v, 0xB1));
    v = _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 0x01));
    return _mm256_cvtss_f32(v);
  }
  static Vec Exp(Vec x) { return internal::Exp256(x); }
  // sums[e] = Σ lanes of acc[e / 4][e % 4], by a transposing tree.
  static void ReduceTile(const Vec (&a)[2][4], float* sums) {
    Vec t[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const Vec lo = a[q / 2][2 * (q % 2)], hi = a[q / 2][2 * (q % 2) + 1];
      t[q] = _mm256_add_ps(_mm256_unpacklo_ps(lo, hi), _mm256_unpackhi_ps(lo, hi));
    }
    const Vec u0 =
        _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], 0x44), _mm256_shuffle_ps(t[0], t[1], 0xEE));
    const Vec u1 =
        _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], 0x44), _mm256_shuffle_ps(t[2], t[3], 0xEE));
    _mm256_storeu_ps(sums, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                         _mm256_permute2f128_ps(u0, u1, 0x31)));
  }
};

#include "kernels/cpu/mla_tiles_impl.h"  // NOLINT(build/include)

#undef MLA_TARGET

}  // namespace avx2
}  // namespace

const TileKernels& TileKernelsFor(Isa isa) {
  CHECK(isa != Isa::kScalar) << "the MLA tile kernels need AVX2";
  if (isa >= Isa::kAvx512Bf16) return avx512::kTileKernelsBf16;
  return isa >= Isa::kAvx512 ? avx512::kTileKernels : avx2::kTileKernels;
}

void Absorb(const TileKernels& k, const float* w_uk, const MlaDims& d, const float* const* q, int n,
            float* const* out) {
  CHECK_LE(n, kMaxQueries);
  const int dn = d.qk_nope_head_dim, r = d.kv_lora_rank;
  // W_UK rows in chunks of kMaxSources; the accumulator round-trips through `out` exactly.
  const float* src[kMaxSources];
  const float* coef[kMaxQueries];
  float ones[kMaxQueries];
  std::fill(ones, ones + n, 1.0f);
  for (int a0 = 0; a0 < dn; a0 += kMaxSources) {
    const int na = std::min(kMaxSources, dn - a0);
    for (int a = 0; a < na; ++a) src[a] = w_uk + static_cast<int64_t>(a0 + a) * r;
    for (int i = 0; i < n; ++i) coef[i] = q[i] + a0;
    k.axpy(out, n, a0 == 0 ? nullptr : ones, coef, src, na, r);
  }
  if (dn == 0) {
    for (int i = 0; i < n; ++i) std::fill(out[i], out[i] + r, 0.0f);
  }
  for (int i = 0; i < n; ++i) {
    std::copy(q[i] + dn, q[i] + dn + d.qk_rope_head_dim, out[i] + r);
  }
}

void UpProject(const TileKernels& k, const float* w_uv, const MlaDims& d, const float* const* x,
               int n, const float* const* gate, float* const* o) {
  CHECK_LE(n, kMaxQueries);
  const int dv = d.v_head_dim, r = d.kv_lora_rank;
  constexpr int kRowChunk = 64;
  const float* rows[kRowChunk];
  float* out[kMaxQueries];
  for (int c0 = 0; c0 < dv; c0 += kRowChunk) {
    const int nc = std::min(kRowChunk, dv - c0);
    for (int c = 0; c < nc; ++c) rows[c] = w_uv + static_cast<int64_t>(c0 + c) * r;
    for (int i = 0; i < n; ++i) out[i] = o[i] + c0;
    k.dots(x, n, rows, nc, r, out);
  }
  for (int i = 0; i < n; ++i) {
    if (gate[i] != nullptr) k.gate(o[i], gate[i], dv);
  }
}

}  // namespace strata::kernels::cpu::mla
