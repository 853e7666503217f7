#include "kernels/cuda/convert.h"
#include "kernels/cuda/internal/launch.cuh"

namespace strata::kernels::cuda {
namespace {

__global__ void Bf16ToF32Kernel(const uint16_t* __restrict__ src, int64_t count,
                                float* __restrict__ dst) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = __uint_as_float(static_cast<uint32_t>(src[i]) << 16);
  }
}

}  // namespace

cudaError_t ConvertBf16ToF32(const uint16_t* src, int64_t count, float* dst, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  int64_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > 65535) blocks = 65535;
  internal::LaunchKernel(Bf16ToF32Kernel, static_cast<unsigned>(blocks), kThreads, 0, stream, src,
                         count, dst);
  return cudaGetLastError();
}

}  // namespace strata::kernels::cuda
