#include "kernels/cpu/attn_res.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels/cpu/internal/simd_exp.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/reference/attn_res.h"

namespace strata::kernels::cpu {
namespace {

using internal::FirstLanes256;
using internal::FirstLanes512;

constexpr int64_t kParallelElements = int64_t{1} << 16;  // tokens·dim·sources

struct DotAndSumSq {
  float dot;     // w_eff · v
  float sum_sq;  // v · v
};

// softmax(z) in place over n sources, f64.
void Softmax(double* z, int n) {
  const double z_max = *std::max_element(z, z + n);
  double denom = 0.0;
  for (int i = 0; i < n; ++i) {
    z[i] = std::exp(z[i] - z_max);
    denom += z[i];
  }
  for (int i = 0; i < n; ++i) z[i] /= denom;
}

double Logit(DotAndSumSq s, int64_t dim, float eps) {
  return s.dot / std::sqrt(static_cast<double>(s.sum_sq) / dim + eps);
}

// ---- AVX2 -------------------------------------------------------------------------------------

DotAndSumSq Dot256(const float* v, const float* wn, const float* wp, int64_t dim) {
  __m256 dot[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  __m256 sq[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t c = 0;
  for (; c + 8 <= dim; c += 8) {
    const __m256 x = _mm256_loadu_ps(v + c);
    const __m256 w = _mm256_mul_ps(_mm256_loadu_ps(wn + c), _mm256_loadu_ps(wp + c));
    dot[(c / 8) % 2] = _mm256_fmadd_ps(w, x, dot[(c / 8) % 2]);
    sq[(c / 8) % 2] = _mm256_fmadd_ps(x, x, sq[(c / 8) % 2]);
  }
  if (c < dim) {
    const __m256i m = FirstLanes256(dim - c);
    const __m256 x = _mm256_maskload_ps(v + c, m);
    const __m256 w = _mm256_mul_ps(_mm256_maskload_ps(wn + c, m), _mm256_maskload_ps(wp + c, m));
    dot[0] = _mm256_fmadd_ps(w, x, dot[0]);
    sq[0] = _mm256_fmadd_ps(x, x, sq[0]);
  }
  return {internal::HorizontalSum256(_mm256_add_ps(dot[0], dot[1])),
          internal::HorizontalSum256(_mm256_add_ps(sq[0], sq[1]))};
}

void Mix256(const float* const* v, const float* pi, int n, int64_t dim, float* out) {
  int64_t c = 0;
  for (; c + 8 <= dim; c += 8) {
    __m256 acc = _mm256_mul_ps(_mm256_set1_ps(pi[0]), _mm256_loadu_ps(v[0] + c));
    for (int i = 1; i < n; ++i)
      acc = _mm256_fmadd_ps(_mm256_set1_ps(pi[i]), _mm256_loadu_ps(v[i] + c), acc);
    _mm256_storeu_ps(out + c, acc);
  }
  if (c < dim) {
    const __m256i m = FirstLanes256(dim - c);
    __m256 acc = _mm256_mul_ps(_mm256_set1_ps(pi[0]), _mm256_maskload_ps(v[0] + c, m));
    for (int i = 1; i < n; ++i) {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(pi[i]), _mm256_maskload_ps(v[i] + c, m), acc);
    }
    _mm256_maskstore_ps(out + c, m, acc);
  }
}

// ---- AVX-512 ----------------------------------------------------------------------------------

STRATA_TARGET_AVX512_EXP DotAndSumSq Dot512(const float* v, const float* wn, const float* wp,
                                            int64_t dim) {
  __m512 dot[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512 sq[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t c = 0;
  for (; c + 16 <= dim; c += 16) {
    const __m512 x = _mm512_loadu_ps(v + c);
    const __m512 w = _mm512_mul_ps(_mm512_loadu_ps(wn + c), _mm512_loadu_ps(wp + c));
    dot[(c / 16) % 2] = _mm512_fmadd_ps(w, x, dot[(c / 16) % 2]);
    sq[(c / 16) % 2] = _mm512_fmadd_ps(x, x, sq[(c / 16) % 2]);
  }
  if (c < dim) {
    const __mmask16 m = FirstLanes512(dim - c);
    const __m512 x = _mm512_maskz_loadu_ps(m, v + c);
    const __m512 w =
        _mm512_mul_ps(_mm512_maskz_loadu_ps(m, wn + c), _mm512_maskz_loadu_ps(m, wp + c));
    dot[0] = _mm512_fmadd_ps(w, x, dot[0]);
    sq[0] = _mm512_fmadd_ps(x, x, sq[0]);
  }
  return {_mm512_reduce_add_ps(_mm512_add_ps(dot[0], dot[1])),
          _mm512_reduce_add_ps(_mm512_add_ps(sq[0], sq[1]))};
}

STRATA_TARGET_AVX512_EXP void Mix512(const float* const* v, const float* pi, int n, int64_t dim,
                                     float* out) {
  int64_t c = 0;
  for (; c + 16 <= dim; c += 16) {
    __m512 acc = _mm512_mul_ps(_mm512_set1_ps(pi[0]), _mm512_loadu_ps(v[0] + c));
    for (int i = 1; i < n; ++i)
      acc = _mm512_fmadd_ps(_mm512_set1_ps(pi[i]), _mm512_loadu_ps(v[i] + c), acc);
    _mm512_storeu_ps(out + c, acc);
  }
  if (c < dim) {
    const __mmask16 m = FirstLanes512(dim - c);
    __m512 acc = _mm512_mul_ps(_mm512_set1_ps(pi[0]), _mm512_maskz_loadu_ps(m, v[0] + c));
    for (int i = 1; i < n; ++i) {
      acc = _mm512_fmadd_ps(_mm512_set1_ps(pi[i]), _mm512_maskz_loadu_ps(m, v[i] + c), acc);
    }
    _mm512_mask_storeu_ps(out + c, m, acc);
  }
}

// One token: z_i from each source row, softmax, weighted sum.
template <bool kAvx512>
void MixToken(absl::Span<const float* const> sources, int64_t t, int64_t dim, const float* w_norm,
              const float* w_proj, float eps, float* out) {
  const int n = static_cast<int>(sources.size());
  const float* rows[kMaxAttnResSources];
  double z[kMaxAttnResSources];
  float pi[kMaxAttnResSources];
  for (int i = 0; i < n; ++i) {
    rows[i] = sources[i] + t * dim;
    const DotAndSumSq s =
        kAvx512 ? Dot512(rows[i], w_norm, w_proj, dim) : Dot256(rows[i], w_norm, w_proj, dim);
    z[i] = Logit(s, dim, eps);
  }
  Softmax(z, n);
  for (int i = 0; i < n; ++i) pi[i] = static_cast<float>(z[i]);
  if (kAvx512) {
    Mix512(rows, pi, n, dim, out + t * dim);
  } else {
    Mix256(rows, pi, n, dim, out + t * dim);
  }
}

}  // namespace

void AttnResMix(absl::Span<const float* const> sources, int64_t num_tokens, int64_t dim,
                const float* w_norm, const float* w_proj, float eps, float* out) {
  const int n = static_cast<int>(sources.size());
  CHECK(n >= 1 && n <= kMaxAttnResSources) << "AttnResMix: " << n << " sources";
  CHECK_GE(num_tokens, 0);
  CHECK_GT(dim, 0);
  const Isa isa = ActiveIsa();
  if (isa == Isa::kScalar) {
    AttnResMixReference(sources.data(), n, num_tokens, dim, w_norm, w_proj, eps, out);
    return;
  }
  const auto mix = isa >= Isa::kAvx512 ? MixToken<true> : MixToken<false>;
  ParallelFor(num_tokens, num_tokens * dim * n >= kParallelElements,
              [&](int64_t t) { mix(sources, t, dim, w_norm, w_proj, eps, out); });
}

}  // namespace strata::kernels::cpu
