// Strata's CUDA emulator (tests/cuda_emu): the part of cuda_bf16.h Strata's kernels use.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda_runtime.h"

struct __nv_bfloat16 {
  uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

namespace strata_emu {
// Round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t FloatToBf16BitsRn(float value) {
  uint32_t u;
  std::memcpy(&u, &value, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16BitsToFloat(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace strata_emu

inline __nv_bfloat16 __float2bfloat16_rn(float value) {
  return __nv_bfloat16{strata_emu::FloatToBf16BitsRn(value)};
}
inline __nv_bfloat16 __float2bfloat16(float value) { return __float2bfloat16_rn(value); }
inline float __bfloat162float(__nv_bfloat16 value) {
  return strata_emu::Bf16BitsToFloat(value.bits);
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 value) { return value.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { return __nv_bfloat16{bits}; }
