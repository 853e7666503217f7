// Device helpers shared by the kernels in kernels/cuda (internal; include from .cu files only):
// bf16 bit conversions, overflow-free activations, warp and block reductions, a block scan.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::kernels::cuda::internal {

__device__ __forceinline__ float Bf16BitsToFloat(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}
// Round to nearest even (NaN stays NaN), same as strata::F32ToBf16.
__device__ __forceinline__ uint16_t FloatToBf16Bits(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

// F32ToBf16 of core/dtype.h (nearest even, NaN kept quiet) in 32-bit integer operations, no
// cvt.rn.bf16.f32: bit-exact with the host where FloatToBf16Bits' NaN differs (mxfp4.cu), and
// safe for byte stores (model_ops.cu's fp8 latent rows: on the H200, byte stores of the cvt's
// 16-bit result wrote a wrong low byte).
__device__ __forceinline__ uint32_t FloatToBf16BitsInt(float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

// int8 codes 2i and 2i + 1 of a little-endian word array as bf16(f32(code) · scale) each (low
// half = even code): F32ToBf16 of core/int8_quantize.h's DecodeInt8, the product exact in f32.
__device__ __forceinline__ uint32_t Int8PairToBf16x2(const uint32_t* words, int i, float scale) {
  const uint32_t w = words[i >> 1] >> ((i & 1) * 16);
  const float lo = static_cast<float>(static_cast<int8_t>(w & 0xffu)) * scale;
  const float hi = static_cast<float>(static_cast<int8_t>((w >> 8) & 0xffu)) * scale;
  return static_cast<uint32_t>(FloatToBf16Bits(lo)) |
         (static_cast<uint32_t>(FloatToBf16Bits(hi)) << 16);
}

// Stores `value` as f32 or as bf16 bits: lets one kernel template write either output type.
__device__ __forceinline__ void StoreOut(float* dst, float value) { *dst = value; }
__device__ __forceinline__ void StoreOut(uint16_t* dst, float value) {
  *dst = FloatToBf16Bits(value);
}

// σ(x) without overflow: exp is only taken of −|x|.
__device__ __forceinline__ float SigmoidF(float x) {
  const float e = __expf(-fabsf(x));
  return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
__device__ __forceinline__ float SiluF(float x) { return x * SigmoidF(x); }
// log(1 + eˣ) = max(x, 0) + log1p(e^−|x|).
__device__ __forceinline__ float SoftplusF(float x) {
  return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
// `scratch` holds ≥ 32 floats of shared memory; the call contains two __syncthreads().
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = WarpSum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < num_warps; ++w) total += scratch[w];  // same order in every thread
  __syncthreads();                                          // scratch may be reused right after
  return total;
}

// In-place inclusive scan (Hillis–Steele) of scan[0, blockDim.x) in shared memory, thread t
// having written scan[t]; every thread of the block calls it. Ends with a __syncthreads().
__device__ __forceinline__ void BlockInclusiveScan(int32_t* scan) {
  const int tid = threadIdx.x;
  __syncthreads();
  for (int d = 1; d < static_cast<int>(blockDim.x); d <<= 1) {
    const int32_t v = tid >= d ? scan[tid - d] : 0;
    __syncthreads();
    scan[tid] += v;
    __syncthreads();
  }
}

}  // namespace strata::kernels::cuda::internal
