// The step MXFP4 and int8 quantisation share (core/mxfp4_quantize.h, core/int8_quantize.h): one
// group of 32 values of a row, read as f32 bit patterns, and its largest magnitude.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace strata {

inline constexpr int kQuantGroupSize = 32;

// The group at `src` (dtype kF32 or kBF16, not necessarily aligned) as f32 bits: bf16 is the high
// half of an f32.
inline void LoadGroupBits(DType dtype, const uint8_t* src, uint32_t (&bits)[kQuantGroupSize]) {
  if (dtype == DType::kF32) {
    std::memcpy(bits, src, sizeof(bits));
    return;
  }
  uint16_t raw[kQuantGroupSize];
  std::memcpy(raw, src, sizeof(raw));
  for (int i = 0; i < kQuantGroupSize; ++i) bits[i] = uint32_t{raw[i]} << 16;
}

// The bits of the group's largest |value|: |v|'s bits order like |v| for finite values, and an
// infinite or NaN value gives ≥ 0x7F800000 (they sort above them all).
inline uint32_t GroupAmaxBits(const uint32_t (&bits)[kQuantGroupSize]) {
  uint32_t amax_bits = 0;
  for (uint32_t b : bits) amax_bits = std::max(amax_bits, b & 0x7FFFFFFFu);
  return amax_bits;
}
inline constexpr uint32_t kNonFiniteBits = 0x7F800000u;

}  // namespace strata
