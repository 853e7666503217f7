// AVX2 helpers shared by the tile kernels: the fixed reduction tree and the tile store (the
// AVX2 twin of simd_avx512.h). The baseline build is already AVX2+FMA, so no target attribute.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/internal/matmul_tiles.h"

namespace strata::kernels::cpu::internal {

// Σ of the 8 lanes by the tree ((l0+l2)+(l1+l3)) within each 128-bit lane, then L0+L1.
inline float ReduceTree256(__m256 v) {
  v = _mm256_add_ps(v, _mm256_permute_ps(v, 0x4E));
  v = _mm256_add_ps(v, _mm256_permute_ps(v, 0xB1));
  v = _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 0x01));
  return _mm256_cvtss_f32(v);
}

// Lane e of the result = ReduceTree256(a[e / 4][e % 4]), same tree.
inline __m256 Reduce8(const __m256 (&a)[2][4]) {
  __m256 t[4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m256 lo = a[q / 2][2 * (q % 2)];
    const __m256 hi = a[q / 2][2 * (q % 2) + 1];
    t[q] = _mm256_add_ps(_mm256_unpacklo_ps(lo, hi), _mm256_unpackhi_ps(lo, hi));
  }
  const __m256 u0 =
      _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], 0x44), _mm256_shuffle_ps(t[0], t[1], 0xEE));
  const __m256 u1 =
      _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], 0x44), _mm256_shuffle_ps(t[2], t[3], 0xEE));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Lanes 0..3 of the result = ReduceTree256(a[0..3]), same tree.
inline __m128 Reduce4(const __m256 (&a)[4]) {
  const __m256 t0 = _mm256_add_ps(_mm256_unpacklo_ps(a[0], a[1]), _mm256_unpackhi_ps(a[0], a[1]));
  const __m256 t1 = _mm256_add_ps(_mm256_unpacklo_ps(a[2], a[3]), _mm256_unpackhi_ps(a[2], a[3]));
  const __m256 u = _mm256_add_ps(_mm256_shuffle_ps(t0, t1, 0x44), _mm256_shuffle_ps(t0, t1, 0xEE));
  return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

template <int MR, int NR>
inline void StoreTile256(const __m256 (&acc)[MR][NR], const TileArgs& t) {
  alignas(32) float sums[MR * NR];
  if constexpr (MR == 2 && NR == 4) {
    _mm256_store_ps(sums, Reduce8(acc));
  } else if constexpr (NR == 4) {
#pragma GCC unroll 2
    for (int i = 0; i < MR; ++i) _mm_store_ps(sums + 4 * i, Reduce4(acc[i]));
  } else {
#pragma GCC unroll 8
    for (int e = 0; e < MR * NR; ++e) sums[e] = ReduceTree256(acc[e / NR][e % NR]);
  }
  for (int i = 0; i < MR; ++i) {
    float* yi = t.y + i * t.ldy;
    for (int j = 0; j < NR; ++j) {
      yi[j] = t.accumulate ? yi[j] + sums[i * NR + j] : sums[i * NR + j];
    }
  }
}

// Lane mask for the first `count` (0..8) of 8 f32 lanes, for _mm256_maskload_ps.
inline __m256i FirstLanesMask256(int64_t count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lane);
}

}  // namespace strata::kernels::cpu::internal
