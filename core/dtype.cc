#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/convert_simd.h"

namespace strata {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
  bool is_float;
};

constexpr DTypeInfo kInfo[] = {
    {DType::kF32, "F32", 4, true},        {DType::kF64, "F64", 8, true},
    {DType::kBF16, "BF16", 2, true},      {DType::kF16, "F16", 2, true},
    {DType::kF8E4M3, "F8_E4M3", 1, true}, {DType::kF8E5M2, "F8_E5M2", 1, true},
    {DType::kU8, "U8", 1, false},         {DType::kI8, "I8", 1, false},
    {DType::kI16, "I16", 2, false},       {DType::kI32, "I32", 4, false},
    {DType::kI64, "I64", 8, false},       {DType::kBool, "BOOL", 1, false},
};

const DTypeInfo& Info(DType dtype) {
  for (const DTypeInfo& info : kInfo) {
    if (info.dtype == dtype) return info;
  }
  CHECK(false) << "unknown dtype " << static_cast<int>(dtype);
  return kInfo[0];
}

}  // namespace

size_t DTypeSize(DType dtype) { return Info(dtype).size; }
std::string_view DTypeName(DType dtype) { return Info(dtype).name; }
bool IsFloat(DType dtype) { return Info(dtype).is_float; }

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const DTypeInfo& info : kInfo) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

float F16ToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // zero or subnormal: mantissa * 2^-24, exact in f32
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) {
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t F32ToF16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65536: infinity
  if (abs_bits < 0x38800000u) {
    // below the smallest normal (2^-14): subnormal result, round to nearest even in units of
    // 2^-24. Adding 0.5 (2^-1) aligns the f32 mantissa so the FPU does the rounding.
    const float magic = std::bit_cast<float>(0x3f000000u);  // 0.5
    float shifted = std::bit_cast<float>(abs_bits) + magic;
    return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(shifted) - 0x3f000000u);
  }
  // normal: rebias the exponent (127 -> 15) and round the mantissa 23 -> 10 bits
  uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

float F8E4M3ToF32(uint8_t bits) {
  const bool negative = bits & 0x80u;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 * 2^-6
  } else {
    magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  }
  return negative ? -magnitude : magnitude;
}

uint8_t F32ToF8E4M3(float value) {
  if (std::isnan(value)) return 0x7f;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  float magnitude = std::fabs(value);
  if (magnitude >= 448.0f) return sign | 0x7e;  // saturate to the largest finite value
  // Find the nearest representable value by scanning the 127 non-negative finite codes in
  // order; exact and simple (this is not a hot path).
  uint8_t best = 0;
  for (uint8_t code = 1; code <= 0x7e; ++code) {
    float candidate = F8E4M3ToF32(code);
    float previous = F8E4M3ToF32(best);
    if (candidate <= magnitude) {
      best = code;
      continue;
    }
    // magnitude lies in [previous, candidate): round to nearest, ties to the even code
    float to_previous = magnitude - previous;
    float to_candidate = candidate - magnitude;
    if (to_candidate < to_previous || (to_candidate == to_previous && (code & 1) == 0)) {
      best = code;
    }
    break;
  }
  return sign | best;
}

float F8E5M2ToF32(uint8_t bits) { return F16ToF32(static_cast<uint16_t>(bits) << 8); }

float E8M0ToF32(uint8_t bits) {
  if (bits == 0xff) return std::numeric_limits<float>::quiet_NaN();
  if (bits == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127 (f32 subnormal)
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 23);
}

void ConvertToF32(DType dtype, const void* src, size_t count, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kF64: {
      const double* in = static_cast<const double*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(in[i]);
      return;
    }
    case DType::kBF16:
      Bf16ToF32Rows(static_cast<const uint16_t*>(src), count, dst);
      return;
    case DType::kF16: {
      const uint16_t* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = F16ToF32(in[i]);
      return;
    }
    case DType::kF8E4M3: {
      const uint8_t* in = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = F8E4M3ToF32(in[i]);
      return;
    }
    case DType::kF8E5M2: {
      const uint8_t* in = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = F8E5M2ToF32(in[i]);
      return;
    }
    default:
      CHECK(false) << "ConvertToF32: not a float dtype: " << DTypeName(dtype);
  }
}

void ConvertF32ToBf16(const float* src, size_t count, uint16_t* dst) {
  F32ToBf16Rows(src, count, dst);
}

void DecodeMxfp4(const uint8_t* packed, const uint8_t* scales, size_t count, float* dst) {
  CHECK_EQ(count % kMxfp4BlockSize, 0u);
  for (size_t block = 0; block < count / kMxfp4BlockSize; ++block) {
    const float scale = E8M0ToF32(scales[block]);
    const uint8_t* bytes = packed + block * (kMxfp4BlockSize / 2);
    float* out = dst + block * kMxfp4BlockSize;
    for (int i = 0; i < kMxfp4BlockSize / 2; ++i) {
      out[2 * i] = kE2M1Values[bytes[i] & 0xf] * scale;
      out[2 * i + 1] = kE2M1Values[bytes[i] >> 4] * scale;
    }
  }
}

}  // namespace strata
