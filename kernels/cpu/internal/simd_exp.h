// Vector e^x in f32 for the AVX2 baseline and AVX-512 (Cephes expf: range reduction by ln 2 in
// two parts, degree-6 polynomial, scaling by 2^n): relative error ≤ 2 ulp for x in
// [−87.3, 88]; larger x saturates at e^88, x < −87.33 (and −inf) gives exactly 0.
// Include only from kernels/cpu/*.cc (the AVX-512 functions carry their target attribute).
#pragma once

#include "core/avx512_intrinsics.h"

#define STRATA_TARGET_AVX512_EXP __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace strata::kernels::cpu::internal {

inline constexpr float kExpHi = 88.0f;               // above: saturates (2^n stays finite)
inline constexpr float kExpLo = -87.3365478515625f;  // below: the result is 0

inline __m256 Exp256(__m256 x) {
  const __m256 zero_below = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLo), _CMP_GE_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kExpLo)), _mm256_set1_ps(kExpHi));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), zero_below);
}

STRATA_TARGET_AVX512_EXP inline __m512 Exp512(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLo), _CMP_GE_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kExpLo)), _mm512_set1_ps(kExpHi));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, n));
}

// 2^f for f ∈ [−½, ½]: the degree-6 Taylor polynomial of e^(f·ln 2), Horner form from the
// highest power (relative error ≤ 1.3e-7 there). For the base-2 softmax of the MLA lane tiles.
inline constexpr float kExp2Taylor[7] = {1.5403530393381606e-4f,
                                         1.3333558146428443e-3f,
                                         9.6181291076284772e-3f,
                                         5.5504108664821580e-2f,
                                         2.4022650695910071e-1f,
                                         6.9314718055994531e-1f,
                                         1.0f};

inline __m256 Exp2Poly(__m256 f) {
  __m256 p = _mm256_set1_ps(kExp2Taylor[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2Taylor[i]));
  return p;
}

STRATA_TARGET_AVX512_EXP inline __m512 Exp2Poly(__m512 f) {
  __m512 p = _mm512_set1_ps(kExp2Taylor[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Taylor[i]));
  return p;
}

// Lane mask for the first `count` (0..8) of 8 f32 lanes, for _mm256_maskload_ps.
inline __m256i FirstLanes256(int64_t count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lane);
}

// Lane mask for the first `count` of 16 lanes (count ≤ 0: none, ≥ 16: all).
inline __mmask16 FirstLanes512(int64_t count) {
  if (count <= 0) return 0;
  return static_cast<__mmask16>(count >= 16 ? 0xFFFF : (1u << count) - 1);
}

STRATA_TARGET_AVX512_EXP inline float HorizontalSum512(__m512 v) { return _mm512_reduce_add_ps(v); }

inline float HorizontalSum256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

}  // namespace strata::kernels::cpu::internal
