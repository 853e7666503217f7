#include "core/convert_simd.h"

#include "core/avx512_intrinsics.h"

#include "core/check.h"
#include "core/dtype.h"

namespace strata {
namespace {

void Bf16ToF32Scalar(const uint16_t* src, size_t count, float* dst) {
  for (size_t i = 0; i < count; ++i) dst[i] = Bf16ToF32(src[i]);
}

void Bf16ToF32Avx2(const uint16_t* src, size_t count, float* dst) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m256i wide = _mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(wide));
  }
  Bf16ToF32Scalar(src + i, count - i, dst + i);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void Bf16ToF32Avx512(const uint16_t* src,
                                                                          size_t count,
                                                                          float* dst) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    __m512i wide = _mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16);
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(wide));
  }
  if (i < count) {  // masked tail: no scalar loop, no out-of-bounds access
    const __mmask16 mask = static_cast<__mmask16>((1u << (count - i)) - 1);
    __m256i bits = _mm256_maskz_loadu_epi16(mask, src + i);
    __m512i wide = _mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16);
    _mm512_mask_storeu_ps(dst + i, mask, _mm512_castsi512_ps(wide));
  }
}

}  // namespace

void Bf16ToF32RowsIsa(Isa isa, const uint16_t* src, size_t count, float* dst) {
  switch (isa) {
    case Isa::kAvx512:
    case Isa::kAvx512Bf16:
      CHECK(GetCpuFeatures().avx512bw && GetCpuFeatures().avx512vl)
          << "AVX-512 path requested on a CPU without it";
      Bf16ToF32Avx512(src, count, dst);
      return;
    case Isa::kAvx2:
      Bf16ToF32Avx2(src, count, dst);
      return;
    case Isa::kScalar:
      Bf16ToF32Scalar(src, count, dst);
      return;
  }
}

void Bf16ToF32Rows(const uint16_t* src, size_t count, float* dst) {
  Bf16ToF32RowsIsa(ActiveIsa(), src, count, dst);
}

}  // namespace strata
