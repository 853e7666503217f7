// Activation rows in the tiles' kEvenOdd order (internal/matmul_tiles.h): per block of 2V
// elements, the V even-indexed ones then the V odd-indexed ones; the ragged end of a row is
// zero-padded to a whole block.
#include "core/avx512_intrinsics.h"

#include <algorithm>

#include "core/dtype.h"

#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/internal/simd_avx512.h"

namespace strata::kernels::cpu::internal {
namespace {

// The last partial block (k % block elements from `src`), evens then odds, zero-padded.
void PackTail(const float* src, int64_t count, int64_t block, float* dst) {
  const int64_t half = block / 2;
  for (int64_t l = 0; l < half; ++l) {
    dst[l] = 2 * l < count ? src[2 * l] : 0.0f;
    dst[half + l] = 2 * l + 1 < count ? src[2 * l + 1] : 0.0f;
  }
}

}  // namespace

STRATA_TARGET_AVX512 void PackEvenOddRowAvx512(const float* src, int64_t k, void* out) {
  auto* dst = static_cast<float*>(out);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  int64_t p = 0;
  for (; p + 32 <= k; p += 32) {
    const __m512 a = _mm512_loadu_ps(src + p), b = _mm512_loadu_ps(src + p + 16);
    _mm512_storeu_ps(dst + p, _mm512_permutex2var_ps(a, even, b));
    _mm512_storeu_ps(dst + p + 16, _mm512_permutex2var_ps(a, odd, b));
  }
  if (p < k) PackTail(src + p, k - p, 32, dst + p);
}

void PackEvenOddRowAvx2(const float* src, int64_t k, void* out) {
  auto* dst = static_cast<float*>(out);
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    const __m256 a = _mm256_loadu_ps(src + p), b = _mm256_loadu_ps(src + p + 8);
    // shuffle: [a0 a2 b0 b2 | a4 a6 b4 b6]; 64-bit lanes (0, 2, 1, 3) → [a0 a2 a4 a6 b0 b2 b4 b6]
    const __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xDD);
    _mm256_storeu_ps(dst + p, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8)));
    _mm256_storeu_ps(dst + p + 8,
                     _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8)));
  }
  if (p < k) PackTail(src + p, k - p, 16, dst + p);
}

void PackBf16Row(const float* src, int64_t k, void* out) {
  auto* dst = static_cast<uint16_t*>(out);
  ConvertF32ToBf16(src, static_cast<size_t>(k), dst);
  std::fill(dst + k, dst + (k + 31) / 32 * 32, uint16_t{0});
}

}  // namespace strata::kernels::cpu::internal
