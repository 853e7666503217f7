// Vectorised GLU activations (internal/glu_act.h): the same Cephes-style exp / tanh on 16 lanes
// (AVX-512) and 8 lanes (AVX2). The ragged end goes through a zero-padded vector.
#include "core/avx512_intrinsics.h"

#include <algorithm>

#include "kernels/cpu/internal/glu_act.h"
#include "kernels/cpu/internal/simd_avx512.h"
#include "kernels/cpu/internal/simd_exp.h"

namespace strata::kernels::cpu::internal {
namespace {

// e^x: Exp512 / Exp256 of internal/simd_exp.h (Cephes expf, ≤ 2 ulp).

// Cephes tanhf: |x| < 0.625: x + x·x²·P(x²); else 1 − 2/(e^{2|x|} + 1) with x's sign.
constexpr float kTanhSmall = 0.625f;
constexpr float kTanhP[5] = {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                             1.33314422036e-1f, -3.33332819422e-1f};

// ---- AVX-512 ----------------------------------------------------------------------------------

STRATA_TARGET_AVX512 inline __m512 Sigmoid512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, Exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

STRATA_TARGET_AVX512 inline __m512 Tanh512(__m512 x) {
  const __m512 abs = _mm512_abs_ps(x);
  const __m512 z = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(kTanhP[0]);
  for (int i = 1; i < 5; ++i) p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(kTanhP[i]));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = Exp512(_mm512_add_ps(abs, abs));
  __m512 large = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
  large = _mm512_or_ps(large, _mm512_and_ps(x, _mm512_set1_ps(-0.0f)));  // x's sign
  const __mmask16 is_large = _mm512_cmp_ps_mask(abs, _mm512_set1_ps(kTanhSmall), _CMP_GE_OQ);
  return _mm512_mask_blend_ps(is_large, small, large);
}

STRATA_TARGET_AVX512 inline __m512 Glu512(__m512 g, __m512 u, const GluParams& params) {
  if (params.kind == GluKind::kSwiGlu) return _mm512_mul_ps(_mm512_mul_ps(g, Sigmoid512(g)), u);
  const __m512 b1 = _mm512_set1_ps(params.beta1);
  const __m512 gate =
      _mm512_mul_ps(_mm512_mul_ps(b1, Tanh512(_mm512_div_ps(g, b1))), Sigmoid512(g));
  if (params.beta2 > 0.0f) {
    const __m512 b2 = _mm512_set1_ps(params.beta2);
    u = _mm512_mul_ps(b2, Tanh512(_mm512_div_ps(u, b2)));
  }
  return _mm512_mul_ps(gate, u);
}

// ---- AVX2 -------------------------------------------------------------------------------------

inline __m256 Sigmoid256(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, Exp256(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

inline __m256 Tanh256(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 abs = _mm256_andnot_ps(sign, x);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(kTanhP[0]);
  for (int i = 1; i < 5; ++i) p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(kTanhP[i]));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = Exp256(_mm256_add_ps(abs, abs));
  __m256 large = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  large = _mm256_or_ps(large, _mm256_and_ps(x, sign));
  const __m256 is_large = _mm256_cmp_ps(abs, _mm256_set1_ps(kTanhSmall), _CMP_GE_OQ);
  return _mm256_blendv_ps(small, large, is_large);
}

inline __m256 Glu256(__m256 g, __m256 u, const GluParams& params) {
  if (params.kind == GluKind::kSwiGlu) return _mm256_mul_ps(_mm256_mul_ps(g, Sigmoid256(g)), u);
  const __m256 b1 = _mm256_set1_ps(params.beta1);
  const __m256 gate =
      _mm256_mul_ps(_mm256_mul_ps(b1, Tanh256(_mm256_div_ps(g, b1))), Sigmoid256(g));
  if (params.beta2 > 0.0f) {
    const __m256 b2 = _mm256_set1_ps(params.beta2);
    u = _mm256_mul_ps(b2, Tanh256(_mm256_div_ps(u, b2)));
  }
  return _mm256_mul_ps(gate, u);
}

}  // namespace

STRATA_TARGET_AVX512 void GluActAvx512(const float* g, const float* u, int64_t n,
                                       const GluParams& params, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, Glu512(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i), params));
  }
  if (i < n) {
    const __mmask16 mask = _cvtu32_mask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(
        out + i, mask,
        Glu512(_mm512_maskz_loadu_ps(mask, g + i), _mm512_maskz_loadu_ps(mask, u + i), params));
  }
}

void GluActAvx2(const float* g, const float* u, int64_t n, const GluParams& params, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, Glu256(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i), params));
  }
  if (i < n) {
    alignas(32) float gt[8] = {}, ut[8] = {}, ot[8];
    std::copy(g + i, g + n, gt);
    std::copy(u + i, u + n, ut);
    _mm256_store_ps(ot, Glu256(_mm256_load_ps(gt), _mm256_load_ps(ut), params));
    std::copy(ot, ot + (n - i), out + i);
  }
}

}  // namespace strata::kernels::cpu::internal
