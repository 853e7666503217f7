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

void F32ToBf16Scalar(const float* src, size_t count, uint16_t* dst) {
  for (size_t i = 0; i < count; ++i) dst[i] = F32ToBf16(src[i]);
}

// F32ToBf16 on 8 lanes: the 32-bit results (each < 2^16).
__m256i F32ToBf16Lanes(__m256i bits) {
  const __m256i high = _mm256_srli_epi32(bits, 16);
  const __m256i rounding =
      _mm256_add_epi32(_mm256_and_si256(high, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, rounding), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(high, _mm256_set1_epi32(0x40)), nan);
}

void F32ToBf16Avx2(const float* src, size_t count, uint16_t* dst) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i a = F32ToBf16Lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i b =
        F32ToBf16Lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // packus per 128-bit lane: [a0-3 b0-3 | a4-7 b4-7]; 64-bit lanes (0, 2, 1, 3) restore order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  F32ToBf16Scalar(src + i, count - i, dst + i);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) __m512i F32ToBf16Lanes(__m512i bits) {
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __m512i rounding =
      _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, rounding), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x40));
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void F32ToBf16Avx512(const float* src,
                                                                          size_t count,
                                                                          uint16_t* dst) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i lanes = F32ToBf16Lanes(_mm512_loadu_si512(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(lanes));
  }
  if (i < count) {  // masked tail: no scalar loop, no out-of-bounds access
    const __mmask16 mask = static_cast<__mmask16>((1u << (count - i)) - 1);
    const __m512i lanes = F32ToBf16Lanes(_mm512_maskz_loadu_epi32(mask, src + i));
    _mm512_mask_cvtepi32_storeu_epi16(dst + i, mask, lanes);
  }
}

// One conversion's variants, picked for `isa`.
template <typename Src, typename Dst>
struct Variants {
  void (*avx512)(const Src*, size_t, Dst*);
  void (*avx2)(const Src*, size_t, Dst*);
  void (*scalar)(const Src*, size_t, Dst*);
};

template <typename Src, typename Dst>
void Run(const Variants<Src, Dst>& v, Isa isa, const Src* src, size_t count, Dst* dst) {
  switch (isa) {
    case Isa::kAvx512:
    case Isa::kAvx512Bf16:
      CHECK(GetCpuFeatures().avx512bw && GetCpuFeatures().avx512vl)
          << "AVX-512 path requested on a CPU without it";
      v.avx512(src, count, dst);
      return;
    case Isa::kAvx2:
      v.avx2(src, count, dst);
      return;
    case Isa::kScalar:
      v.scalar(src, count, dst);
      return;
  }
}

}  // namespace

void F32ToBf16RowsIsa(Isa isa, const float* src, size_t count, uint16_t* dst) {
  Run<float, uint16_t>({F32ToBf16Avx512, F32ToBf16Avx2, F32ToBf16Scalar}, isa, src, count, dst);
}

void F32ToBf16Rows(const float* src, size_t count, uint16_t* dst) {
  F32ToBf16RowsIsa(ActiveIsa(), src, count, dst);
}

void Bf16ToF32RowsIsa(Isa isa, const uint16_t* src, size_t count, float* dst) {
  Run<uint16_t, float>({Bf16ToF32Avx512, Bf16ToF32Avx2, Bf16ToF32Scalar}, isa, src, count, dst);
}

void Bf16ToF32Rows(const uint16_t* src, size_t count, float* dst) {
  Bf16ToF32RowsIsa(ActiveIsa(), src, count, dst);
}

}  // namespace strata
