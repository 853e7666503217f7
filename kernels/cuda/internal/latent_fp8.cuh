// The fp8 latent rows (core/latent_row.h, FlashMLA's layout) on the device (internal; include
// from .cu files only). At the fixed MLA dims of kernels/cuda (576 = 512 + 64) a row is
//   [512 e4m3 codes | 4 f32 scales (one per 128 codes) | 64 bf16 rope values] = 656 bytes,
// 16-byte aligned whenever its page is, so it splits into 72 chunks that each become one
// 16-byte chunk (8 bf16 values) of the bf16 row the MLA kernels read: chunks 0..63 are 8 codes
// dequantized (bf16(code · scale), the value a bf16 cache would hold of the decoded f32 value),
// chunks 64..71 the rope bytes as they are.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/internal/device_math.cuh"

namespace strata::kernels::cuda::internal {

inline constexpr int kFp8RowBytes = 656;
inline constexpr int kFp8ScaleOffset = 512;  // bytes: after the codes
inline constexpr int kFp8RopeOffset = 528;   // bytes: after the 4 scales
inline constexpr int kFp8CodeChunks = 64;    // 8 codes each
inline constexpr int kFp8RowChunks = 72;     // + 8 rope chunks
inline constexpr float kFp8Max = 448.0f;

// Exact f32 value of an e4m3 code: the 7 magnitude bits at f32 bit 20 read as 2^-120 · value
// (subnormal codes land on f32 subnormals with the same step).
__device__ __forceinline__ float E4M3ToFloat(uint32_t code) {
  return __uint_as_float((code & 0x80u) << 24 | (code & 0x7Fu) << 20) * 0x1p120f;
}

// Round to nearest even, saturating to ±448, NaN → 0x7F: the CPU codec's F32ToE4M3Fast.
__device__ __forceinline__ uint8_t FloatToE4M3(float value) {
  const uint32_t bits = __float_as_uint(value);
  const uint32_t sign = (bits >> 24) & 0x80u, magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return 0x7F;
  if (magnitude >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // ≥ 448
  if (magnitude < 0x3C800000u) {  // < 2^-6: subnormal steps of 2^-9 (exact product)
    return static_cast<uint8_t>(sign |
                                static_cast<uint32_t>(rintf(__uint_as_float(magnitude) * 512.0f)));
  }
  const uint32_t rounded = (magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u)) >> 20;
  return static_cast<uint8_t>(sign | (rounded - (120u << 3)));
}

// 16-byte chunk `chunk` (< kFp8RowChunks) of the bf16 row of the fp8 row at `row` (global or
// shared memory, 16-byte aligned).
__device__ __forceinline__ uint4 Fp8RowChunkToBf16(const uint8_t* row, int chunk) {
  if (chunk >= kFp8CodeChunks) {
    return *reinterpret_cast<const uint4*>(row + kFp8RopeOffset + (chunk - kFp8CodeChunks) * 16);
  }
  const uint2 codes = *reinterpret_cast<const uint2*>(row + chunk * 8);
  const float scale = *reinterpret_cast<const float*>(row + kFp8ScaleOffset + 4 * (chunk / 16));
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = i < 2 ? codes.x : codes.y;
    const int shift = 16 * (i & 1);
    const uint32_t lo = FloatToBf16Bits(E4M3ToFloat((word >> shift) & 0xFFu) * scale);
    const uint32_t hi = FloatToBf16Bits(E4M3ToFloat((word >> (shift + 8)) & 0xFFu) * scale);
    out[i] = lo | hi << 16;
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Latent value d (< 576) of the fp8 row at `row`, in f32 (code · scale, not rounded to bf16).
__device__ __forceinline__ float Fp8RowValue(const uint8_t* row, int d) {
  if (d >= 512) {
    return Bf16BitsToFloat(
        *reinterpret_cast<const uint16_t*>(row + kFp8RopeOffset + 2 * (d - 512)));
  }
  return E4M3ToFloat(row[d]) *
         *reinterpret_cast<const float*>(row + kFp8ScaleOffset + 4 * (d / 128));
}

}  // namespace strata::kernels::cuda::internal
