#include "kernels/cpu/latent_codec.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace strata::kernels::cpu {
namespace {

constexpr uint32_t kF32Of448 = 0x43E00000u;          // 448.0f: the e4m3 saturation point
constexpr uint32_t kF32MinNormalE4M3 = 0x3C800000u;  // 2^-6: below it e4m3 is subnormal
// An e4m3 code's exponent and mantissa bits placed at f32 bits 20..26 read as 2^-120 times the
// value (exponent bias 127 vs 7; subnormal codes land on f32 subnormals with the same step).
constexpr float kE4M3Rebias = 0x1p120f;

// Rows lie at any byte offset (core/latent_row.h): loads and stores are unaligned.
void EncodeBf16(const float* x, int32_t n, std::byte* out) {
  for (int32_t i = 0; i < n; ++i) {
    const uint16_t bits = F32ToBf16(x[i]);
    std::memcpy(out + 2 * i, &bits, 2);
  }
}

void DecodeBf16(const std::byte* in, int32_t n, float* out) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, in + 2 * i, 2);
    out[i] = Bf16ToF32(bits);
  }
}

float DecodeFp8(uint8_t code, float scale) {
  const uint32_t bits = (uint32_t{code} & 0x80u) << 24 | (uint32_t{code} & 0x7Fu) << 20;
  return std::bit_cast<float>(bits) * kE4M3Rebias * scale;
}

// 8 codes → 8 floats: (sign << 24 | (code & 0x7F) << 20) as f32, times 2^120 (exact), times the
// group's scale (the one rounding, as the reference's F8E4M3ToF32(code) · scale).
inline __m256 DecodeFp8x8(const std::byte* codes, __m256 scale) {
  const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  const __m256i magnitude = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7F)), 20);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
  const __m256 v = _mm256_castsi256_ps(_mm256_or_si256(magnitude, sign));
  return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(kE4M3Rebias)), scale);
}

}  // namespace

uint8_t F32ToE4M3Fast(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return 0x7F;        // NaN
  if (magnitude >= kF32Of448) return sign | 0x7E;  // saturate (infinity included)
  if (magnitude < kF32MinNormalE4M3) {             // subnormal: steps of 2^-9, exact product
    const float steps = std::nearbyint(std::bit_cast<float>(magnitude) * 512.0f);
    return sign | static_cast<uint8_t>(steps);  // 8 steps is the smallest normal code
  }
  // Keep 3 mantissa bits, rounding to nearest even; a carry moves into the exponent as it must.
  const uint32_t rounded = (magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u)) >> 20;
  return sign | static_cast<uint8_t>(rounded - (120u << 3));
}

void EncodeLatentRow(LatentDType dtype, const float* row, int32_t latent_dim, int32_t rope_dim,
                     void* dst) {
  auto* out = static_cast<std::byte*>(dst);
  switch (dtype) {
    case LatentDType::kF32:
      std::memcpy(out, row, sizeof(float) * latent_dim);
      return;
    case LatentDType::kBF16:
      EncodeBf16(row, latent_dim, out);
      return;
    case LatentDType::kFP8: {
      const int32_t nope = latent_dim - rope_dim, groups = Fp8NumGroups(latent_dim, rope_dim);
      std::byte* scales = out + nope;
      for (int32_t g = 0; g < groups; ++g) {
        const int32_t begin = g * kFp8GroupSize, end = std::min(nope, begin + kFp8GroupSize);
        float amax = 0.0f;
        for (int32_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(row[i]));
        const float scale = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
        std::memcpy(scales + 4 * g, &scale, 4);
        for (int32_t i = begin; i < end; ++i) {
          out[i] = static_cast<std::byte>(F32ToE4M3Fast(row[i] / scale));
        }
      }
      EncodeBf16(row + nope, rope_dim, scales + 4 * groups);
      return;
    }
  }
}

void DecodeLatentRow(LatentDType dtype, const void* src, int32_t latent_dim, int32_t rope_dim,
                     float* row) {
  const auto* in = static_cast<const std::byte*>(src);
  switch (dtype) {
    case LatentDType::kF32:
      std::memcpy(row, in, sizeof(float) * latent_dim);
      return;
    case LatentDType::kBF16:
      DecodeBf16(in, latent_dim, row);
      return;
    case LatentDType::kFP8: {
      const int32_t nope = latent_dim - rope_dim, groups = Fp8NumGroups(latent_dim, rope_dim);
      const std::byte* scales = in + nope;
      for (int32_t g = 0; g < groups; ++g) {
        const int32_t begin = g * kFp8GroupSize, end = std::min(nope, begin + kFp8GroupSize);
        float scale;
        std::memcpy(&scale, scales + 4 * g, 4);
        const __m256 vscale = _mm256_set1_ps(scale);
        int32_t i = begin;
        for (; i + 8 <= end; i += 8) _mm256_storeu_ps(row + i, DecodeFp8x8(in + i, vscale));
        for (; i < end; ++i) row[i] = DecodeFp8(static_cast<uint8_t>(in[i]), scale);
      }
      DecodeBf16(scales + 4 * groups, rope_dim, row + nope);
      return;
    }
  }
}

}  // namespace strata::kernels::cpu
