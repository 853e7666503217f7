// Element types and exact conversions.
//
// Formats (all little-endian in memory):
//   f32, f64, bf16 (f32's top 16 bits), f16 (IEEE binary16),
//   f8 e4m3 ("e4m3fn": bias 7, no infinities, S.1111.111 = NaN, max finite 448),
//   e8m0 (an unsigned power-of-two exponent: 2^(e-127), 0xFF = NaN), used as MXFP4 scales,
//   MXFP4 blocks: 32 E2M1 codes packed two per byte, LOW nibble first (even element), plus one
//   e8m0 scale per 32 consecutive elements; value = kE2M1Values[code] * 2^(scale-127).
//
// Widening conversions (to f32) are exact. Narrowing ones round to nearest, ties to even.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

enum class DType : uint8_t {
  kF32,
  kF64,
  kBF16,
  kF16,
  kF8E4M3,
  kF8E5M2,
  kU8,
  kI8,
  kI16,
  kI32,
  kI64,
  kBool,
};

// Bytes per element.
size_t DTypeSize(DType dtype);
// Safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view DTypeName(DType dtype);
// Parses the safetensors spelling; nullopt for an unknown dtype.
std::optional<DType> DTypeFromName(std::string_view name);
bool IsFloat(DType dtype);

// ---- scalar conversions ----------------------------------------------------------------------

inline float Bf16ToF32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}
// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t F32ToBf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float F16ToF32(uint16_t bits);
// Round to nearest even, subnormals kept, overflow to infinity.
uint16_t F32ToF16(float value);

float F8E4M3ToF32(uint8_t bits);
// Round to nearest even; saturates to +-448 (values beyond the range clamp, as quantizers
// expect); NaN maps to 0x7F.
uint8_t F32ToF8E4M3(float value);

float F8E5M2ToF32(uint8_t bits);

// 2^(bits-127); 0xFF is NaN.
float E8M0ToF32(uint8_t bits);

// The sixteen E2M1 values, indexed by the 4-bit code.
inline constexpr float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
inline constexpr int kMxfp4BlockSize = 32;

// ---- row conversions -------------------------------------------------------------------------

// Converts `count` elements of a float dtype (f32, f64, bf16, f16, f8) to f32.
void ConvertToF32(DType dtype, const void* src, size_t count, float* dst);
void ConvertF32ToBf16(const float* src, size_t count, uint16_t* dst);

// Decodes one MXFP4 row of `count` elements (count a multiple of 32):
//   packed: count/2 bytes, scales: count/32 bytes.
void DecodeMxfp4(const uint8_t* packed, const uint8_t* scales, size_t count, float* dst);

}  // namespace strata
