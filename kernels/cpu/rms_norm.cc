#include "kernels/cpu/rms_norm.h"

#include <cmath>

#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels/cpu/internal/simd_exp.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/reference/rms_norm.h"

namespace strata::kernels::cpu {
namespace {

using internal::FirstLanes256;
using internal::FirstLanes512;

// Rows·dim above which rows are spread over OpenMP threads (a team wake-up costs ~10–20 µs).
constexpr int64_t kParallelElements = int64_t{1} << 16;

float InvRms(float sum_sq, int64_t dim, float eps) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(sum_sq) / dim + eps));
}

// ---- AVX2 -------------------------------------------------------------------------------------

// Σ x² of one row; with `a`, first x += a (stored back).
float SumSquares256(float* x_mut, const float* x, const float* a, int64_t dim) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t c = 0;
  for (; c + 8 <= dim; c += 8) {
    __m256 v = _mm256_loadu_ps(x + c);
    if (a != nullptr) {
      v = _mm256_add_ps(v, _mm256_loadu_ps(a + c));
      _mm256_storeu_ps(x_mut + c, v);
    }
    acc[(c / 8) % 4] = _mm256_fmadd_ps(v, v, acc[(c / 8) % 4]);
  }
  if (c < dim) {
    const __m256i m = FirstLanes256(dim - c);
    __m256 v = _mm256_maskload_ps(x + c, m);
    if (a != nullptr) {
      v = _mm256_add_ps(v, _mm256_maskload_ps(a + c, m));
      _mm256_maskstore_ps(x_mut + c, m, v);
    }
    acc[0] = _mm256_fmadd_ps(v, v, acc[0]);
  }
  return internal::HorizontalSum256(
      _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

void Scale256(const float* x, int64_t dim, const float* weight, float inv, float* y) {
  const __m256 s = _mm256_set1_ps(inv);
  int64_t c = 0;
  for (; c + 8 <= dim; c += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + c), s);
    if (weight != nullptr) v = _mm256_mul_ps(v, _mm256_loadu_ps(weight + c));
    _mm256_storeu_ps(y + c, v);
  }
  if (c < dim) {
    const __m256i m = FirstLanes256(dim - c);
    __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + c, m), s);
    if (weight != nullptr) v = _mm256_mul_ps(v, _mm256_maskload_ps(weight + c, m));
    _mm256_maskstore_ps(y + c, m, v);
  }
}

void Row256(float* h, const float* x, const float* a, int64_t r, int64_t dim, const float* weight,
            float eps, float* y) {
  float* hr = h != nullptr ? h + r * dim : nullptr;
  const float* xr = x + r * dim;
  const float sum_sq = SumSquares256(hr, xr, a != nullptr ? a + r * dim : nullptr, dim);
  Scale256(xr, dim, weight, InvRms(sum_sq, dim, eps), y + r * dim);
}

// ---- AVX-512 ----------------------------------------------------------------------------------

STRATA_TARGET_AVX512_EXP float SumSquares512(float* x_mut, const float* x, const float* a,
                                             int64_t dim) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  int64_t c = 0;
  for (; c + 16 <= dim; c += 16) {
    __m512 v = _mm512_loadu_ps(x + c);
    if (a != nullptr) {
      v = _mm512_add_ps(v, _mm512_loadu_ps(a + c));
      _mm512_storeu_ps(x_mut + c, v);
    }
    acc[(c / 16) % 4] = _mm512_fmadd_ps(v, v, acc[(c / 16) % 4]);
  }
  if (c < dim) {
    const __mmask16 m = FirstLanes512(dim - c);
    __m512 v = _mm512_maskz_loadu_ps(m, x + c);
    if (a != nullptr) {
      v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, a + c));
      _mm512_mask_storeu_ps(x_mut + c, m, v);
    }
    acc[0] = _mm512_fmadd_ps(v, v, acc[0]);
  }
  return _mm512_reduce_add_ps(
      _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

STRATA_TARGET_AVX512_EXP void Scale512(const float* x, int64_t dim, const float* weight, float inv,
                                       float* y) {
  const __m512 s = _mm512_set1_ps(inv);
  int64_t c = 0;
  for (; c + 16 <= dim; c += 16) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + c), s);
    if (weight != nullptr) v = _mm512_mul_ps(v, _mm512_loadu_ps(weight + c));
    _mm512_storeu_ps(y + c, v);
  }
  if (c < dim) {
    const __mmask16 m = FirstLanes512(dim - c);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), s);
    if (weight != nullptr) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, weight + c));
    _mm512_mask_storeu_ps(y + c, m, v);
  }
}

STRATA_TARGET_AVX512_EXP void Row512(float* h, const float* x, const float* a, int64_t r,
                                     int64_t dim, const float* weight, float eps, float* y) {
  float* hr = h != nullptr ? h + r * dim : nullptr;
  const float* xr = x + r * dim;
  const float sum_sq = SumSquares512(hr, xr, a != nullptr ? a + r * dim : nullptr, dim);
  Scale512(xr, dim, weight, InvRms(sum_sq, dim, eps), y + r * dim);
}

// Rows of one ISA; spread over threads only when large.
template <bool kAvx512>
void Rows(float* h, const float* x, const float* a, int64_t rows, int64_t dim, const float* weight,
          float eps, float* y) {
  const auto row = kAvx512 ? Row512 : Row256;
  ParallelFor(rows, rows * dim >= kParallelElements,
              [&](int64_t r) { row(h, x, a, r, dim, weight, eps, y); });
}

// h (may be null: no add), x = the rows read (h itself when adding), a (null: no add).
void Dispatch(float* h, const float* x, const float* a, int64_t rows, int64_t dim,
              const float* weight, float eps, float* y) {
  CHECK_GE(rows, 0);
  CHECK_GT(dim, 0);
  switch (ActiveIsa()) {
    case Isa::kScalar:
      if (a != nullptr) {
        for (int64_t i = 0; i < rows * dim; ++i) h[i] += a[i];
      }
      RmsNormReference(x, rows, dim, weight, eps, y);
      return;
    case Isa::kAvx2:
      Rows<false>(h, x, a, rows, dim, weight, eps, y);
      return;
    case Isa::kAvx512:
    case Isa::kAvx512Bf16:
      Rows<true>(h, x, a, rows, dim, weight, eps, y);
      return;
  }
}

}  // namespace

void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y) {
  Dispatch(nullptr, x, nullptr, rows, dim, weight, eps, y);
}

void AddRmsNorm(float* h, const float* a, int64_t rows, int64_t dim, const float* weight, float eps,
                float* y) {
  CHECK(y != h) << "AddRmsNorm: y must not alias h";
  Dispatch(h, h, a, rows, dim, weight, eps, y);
}

}  // namespace strata::kernels::cpu
