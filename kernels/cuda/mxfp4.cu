#include "kernels/cuda/mxfp4.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/launch.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// bf16 bits of kE2M1Values[code] (exact: every E2M1 value has ≤ 2 significant bits).
__constant__ uint16_t kE2M1Bf16[16] = {0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040,
                                       0x4080, 0x40c0, 0x8000, 0xbf00, 0xbf80, 0xbfc0,
                                       0xc000, 0xc040, 0xc080, 0xc0c0};

// As E8M0ToF32 in core/dtype.cc for bits != 0xff (the NaN scale is handled by the caller).
__device__ __forceinline__ float E8M0ToF32(uint32_t bits) {
  if (bits == 0u) return __uint_as_float(0x00400000u);  // 2^-127 (subnormal; no -ftz here)
  return __uint_as_float(bits << 23);
}

// One thread per packed byte (two output elements, written as one 32-bit store).
__global__ void __launch_bounds__(kThreads)
    DequantMxfp4Kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                       int64_t total_bytes, uint16_t* __restrict__ dst) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (b >= total_bytes) return;
  // 16 packed bytes per 32-element block; blocks of a row are contiguous and rows are whole
  // blocks, so byte b belongs to scale b / 16 in the flattened [rows, cols/32] array.
  const uint32_t scale_bits = scales[b / 16];
  if (scale_bits == 0xffu) {
    // The host's kE2M1Values[code] · NaN(0x7fc00000) is that NaN (x86 propagates the NaN
    // operand), bf16 0x7fc0; the GPU would produce its canonical NaN 0x7fffffff instead.
    reinterpret_cast<uint32_t*>(dst)[b] = 0x7fc07fc0u;
    return;
  }
  const float scale = E8M0ToF32(scale_bits);
  const uint32_t byte = packed[b];
  const float lo = __uint_as_float(static_cast<uint32_t>(kE2M1Bf16[byte & 0xfu]) << 16);
  const float hi = __uint_as_float(static_cast<uint32_t>(kE2M1Bf16[byte >> 4]) << 16);
  const uint32_t pair =
      internal::FloatToBf16BitsInt(lo * scale) | (internal::FloatToBf16BitsInt(hi * scale) << 16);
  reinterpret_cast<uint32_t*>(dst)[b] = pair;  // elements 2b (low half) and 2b + 1
}

}  // namespace

absl::Status DequantMxfp4ToBf16(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                                int64_t cols, uint16_t* dst, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || cols % 32 != 0) {
    return absl::InvalidArgumentError("DequantMxfp4ToBf16: cols must be a multiple of 32");
  }
  if (reinterpret_cast<uintptr_t>(dst) % 4 != 0) {
    return absl::InvalidArgumentError("DequantMxfp4ToBf16: dst must be 4-byte aligned");
  }
  const int64_t total_bytes = rows * (cols / 2);
  if (total_bytes == 0) return absl::OkStatus();
  const int64_t blocks = (total_bytes + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return absl::InvalidArgumentError("DequantMxfp4ToBf16: too large");
  internal::LaunchKernel(DequantMxfp4Kernel, static_cast<unsigned>(blocks), kThreads, 0, stream,
                         packed, scales, total_bytes, dst);
  return LaunchStatus("DequantMxfp4Kernel launch");
}

}  // namespace strata::kernels::cuda
