// AVX-512 helpers shared by the tile kernels: the fixed reduction tree and the tile store.
// Include only from kernels/cpu/*.cc files; every function carries STRATA_TARGET_AVX512, so the
// including file keeps the x86-64-v3 baseline everywhere else.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/internal/matmul_tiles.h"

#define STRATA_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace strata::kernels::cpu::internal {

// Σ of the 16 lanes by the tree ((l0+l2)+(l1+l3)) within each 128-bit lane, then
// (L0+L1)+(L2+L3) across lanes. Reduce16 uses the same tree, so a sum does not depend on which
// of the two reduced it.
STRATA_TARGET_AVX512 inline float ReduceTree512(__m512 v) {
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  return _mm512_cvtss_f32(v);
}

// Lane e of the result = ReduceTree512(a[e / 4][e % 4]) (a transposing reduction: 45 instructions
// instead of 16 × 8).
STRATA_TARGET_AVX512 inline __m512 Reduce16(const __m512 (&a)[4][4]) {
  __m512 t[8];
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q) {
    const __m512 lo = a[q / 2][2 * (q % 2)];
    const __m512 hi = a[q / 2][2 * (q % 2) + 1];
    t[q] = _mm512_add_ps(_mm512_unpacklo_ps(lo, hi), _mm512_unpackhi_ps(lo, hi));
  }
  __m512 u[4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    u[q] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * q], t[2 * q + 1], 0x44),
                         _mm512_shuffle_ps(t[2 * q], t[2 * q + 1], 0xEE));
  }
  const __m512 v0 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 v1 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x88), _mm512_shuffle_f32x4(v0, v1, 0xDD));
}

// Lanes 0..3 of the result = ReduceTree512(a[0..3]), same tree (Reduce16's steps for one row
// of four: 13 instructions instead of 4 × 8).
STRATA_TARGET_AVX512 inline __m128 Reduce4(const __m512 (&a)[4]) {
  const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
  const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
  __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, 0x44), _mm512_shuffle_ps(t0, t1, 0xEE));
  u = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, 0xB1));
  u = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, 0x4E));
  return _mm512_castps512_ps128(u);
}

template <int MR, int NR>
STRATA_TARGET_AVX512 inline void StoreTile512(const __m512 (&acc)[MR][NR], const TileArgs& t) {
  alignas(64) float sums[MR * NR];
  if constexpr (MR == 4 && NR == 4) {
    _mm512_store_ps(sums, Reduce16(acc));
  } else if constexpr (NR == 4) {
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) _mm_store_ps(sums + 4 * i, Reduce4(acc[i]));
  } else {
#pragma GCC unroll 16
    for (int e = 0; e < MR * NR; ++e) sums[e] = ReduceTree512(acc[e / NR][e % NR]);
  }
  for (int i = 0; i < MR; ++i) {
    float* yi = t.y + i * t.ldy;
    for (int j = 0; j < NR; ++j) {
      yi[j] = t.accumulate ? yi[j] + sums[i * NR + j] : sums[i * NR + j];
    }
  }
}

}  // namespace strata::kernels::cpu::internal
