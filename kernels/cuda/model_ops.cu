#include "kernels/cuda/model_ops.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/latent_fp8.cuh"
#include "kernels/cuda/internal/launch.cuh"

namespace strata::kernels::cuda {
namespace {

using internal::BlockSum;
using internal::FloatToBf16Bits;
using internal::SigmoidF;
using internal::WarpMax;

constexpr int kThreads = 256;

unsigned GridFor(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);  // grid-stride beyond
}

__global__ void AddInPlaceKernel(float* __restrict__ y, const float* __restrict__ x,
                                 int64_t count) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += stride) {
    y[i] += x[i];
  }
}

__global__ void GateToBf16Kernel(const float* __restrict__ x, const float* __restrict__ g,
                                 int64_t count, uint16_t* __restrict__ out) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += stride) {
    const float v = g != nullptr ? x[i] * SigmoidF(g[i]) : x[i];
    out[i] = FloatToBf16Bits(v);
  }
}

// One token per CTA.
__global__ void __launch_bounds__(kThreads)
    MlaWriteLatentsKernel(const float* __restrict__ kv, int rank, int rope,
                          const float* __restrict__ w, float eps,
                          const int32_t* __restrict__ slot_mapping, uint16_t* __restrict__ pages) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ float red[32];
  const int32_t slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;  // uniform across the CTA: no barrier is skipped by part of it
  const int width = rank + rope;
  const float* src = kv + static_cast<int64_t>(blockIdx.x) * width;
  uint16_t* dst = pages + static_cast<int64_t>(slot) * width;
  float sq = 0.0f;
  for (int c = threadIdx.x; c < rank; c += kThreads) sq += src[c] * src[c];
  const float inv = 1.0f / sqrtf(BlockSum(sq, red) / static_cast<float>(rank) + eps);
  for (int c = threadIdx.x; c < width; c += kThreads) {
    dst[c] = FloatToBf16Bits(c < rank ? src[c] * inv * w[c] : src[c]);
  }
}

// One token per CTA, fp8 rows (core/latent_row.h): warp w quantizes scale groups w, w + 8, ...
// (amax over the group's normalised values, scale = amax / 448, codes = e4m3(x / scale) as the
// CPU codec rounds them); the rope part goes out as bf16. Rows need not be 4-byte aligned (any
// rank): scales and rope values are stored byte by byte.
__global__ void __launch_bounds__(kThreads)
    MlaWriteLatentsFp8Kernel(const float* __restrict__ kv, int rank, int rope,
                             const float* __restrict__ w, float eps,
                             const int32_t* __restrict__ slot_mapping,
                             uint8_t* __restrict__ pages) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ float red[32];
  const int32_t slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;  // uniform across the CTA: no barrier is skipped by part of it
  constexpr int kGroup = 128;
  const int groups = (rank + kGroup - 1) / kGroup;
  const int64_t row_bytes = rank + 4 * groups + 2 * rope;
  const float* src = kv + static_cast<int64_t>(blockIdx.x) * (rank + rope);
  uint8_t* dst = pages + static_cast<int64_t>(slot) * row_bytes;
  float sq = 0.0f;
  for (int c = threadIdx.x; c < rank; c += kThreads) sq += src[c] * src[c];
  const float inv = 1.0f / sqrtf(BlockSum(sq, red) / static_cast<float>(rank) + eps);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int g = warp; g < groups; g += kThreads / 32) {
    const int begin = g * kGroup, end = min(rank, begin + kGroup);
    float x[kGroup / 32];
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kGroup / 32; ++k) {
      const int c = begin + lane + 32 * k;
      x[k] = c < end ? src[c] * inv * w[c] : 0.0f;
      amax = fmaxf(amax, fabsf(x[k]));
    }
    amax = WarpMax(amax);
    const float scale = amax > 0.0f ? amax / internal::kFp8Max : 1.0f;
#pragma unroll
    for (int k = 0; k < kGroup / 32; ++k) {
      const int c = begin + lane + 32 * k;
      if (c < end) dst[c] = internal::FloatToE4M3(x[k] / scale);
    }
    if (lane < 4)
      dst[rank + 4 * g + lane] = static_cast<uint8_t>(__float_as_uint(scale) >> (8 * lane));
  }
  uint8_t* rope_dst = dst + rank + 4 * groups;
  for (int c = threadIdx.x; c < rope; c += kThreads) {
    // Rounded in integer arithmetic, not by cvt.rn.bf16.f32: on the H200 (CUDA 13.0, sm_90a)
    // byte stores of that instruction's 16-bit result wrote 0x00/0x01 as the low byte of every
    // value (the high byte right; the emulator and the 16-bit stores of the bf16 cache right).
    const uint32_t bits = internal::FloatToBf16BitsInt(src[rank + c]);
    rope_dst[2 * c] = static_cast<uint8_t>(bits & 0xFFu);
    rope_dst[2 * c + 1] = static_cast<uint8_t>(bits >> 8);
  }
}

}  // namespace

absl::Status AddInPlace(float* y, const float* x, int64_t count, cudaStream_t stream) {
  if (count < 0) return absl::InvalidArgumentError("AddInPlace: negative count");
  if (count == 0) return absl::OkStatus();
  internal::LaunchKernel(AddInPlaceKernel, GridFor(count), kThreads, 0, stream, y, x, count);
  return LaunchStatus("AddInPlaceKernel launch");
}

absl::Status GateToBf16(const float* x, const float* gate_logits, int64_t count, uint16_t* out,
                        cudaStream_t stream) {
  if (count < 0) return absl::InvalidArgumentError("GateToBf16: negative count");
  if (count == 0) return absl::OkStatus();
  internal::LaunchKernel(GateToBf16Kernel, GridFor(count), kThreads, 0, stream, x, gate_logits,
                         count, out);
  return LaunchStatus("GateToBf16Kernel launch");
}

absl::Status MlaWriteLatents(const float* kv, int64_t rows, int kv_lora_rank, int rope_dim,
                             const float* norm_weight, float eps, const int32_t* slot_mapping,
                             void* pages, LatentDType dtype, cudaStream_t stream) {
  if (rows < 0 || rows > 0x7fffffff || kv_lora_rank <= 0 || rope_dim < 0) {
    return absl::InvalidArgumentError(
        "MlaWriteLatents: rows must be in [0, 2^31), kv_lora_rank > 0, rope_dim >= 0");
  }
  if (dtype != LatentDType::kBF16 && dtype != LatentDType::kFP8) {
    return absl::InvalidArgumentError("MlaWriteLatents: the cache must hold bf16 or fp8 rows");
  }
  if (rows == 0) return absl::OkStatus();
  if (dtype == LatentDType::kFP8) {
    internal::LaunchKernel(MlaWriteLatentsFp8Kernel, static_cast<unsigned>(rows), kThreads, 0,
                           stream, kv, kv_lora_rank, rope_dim, norm_weight, eps, slot_mapping,
                           static_cast<uint8_t*>(pages));
    return LaunchStatus("MlaWriteLatentsFp8Kernel launch");
  }
  internal::LaunchKernel(MlaWriteLatentsKernel, static_cast<unsigned>(rows), kThreads, 0, stream,
                         kv, kv_lora_rank, rope_dim, norm_weight, eps, slot_mapping,
                         static_cast<uint16_t*>(pages));
  return LaunchStatus("MlaWriteLatentsKernel launch");
}

}  // namespace strata::kernels::cuda
