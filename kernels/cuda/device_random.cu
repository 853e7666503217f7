#include "kernels/cuda/device_random.h"

#include <algorithm>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/launch.cuh"

namespace strata::kernels::cuda {
namespace {

__device__ __forceinline__ uint64_t Mix64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

template <typename T>
__global__ void FillUniformKernel(T* __restrict__ dst, int64_t count, uint64_t seed, float lo,
                                  float span) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const uint64_t bits = Mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
    const float unit = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    internal::StoreOut(dst + i, lo + span * unit);
  }
}

template <typename T>
absl::Status Fill(T* dst, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (count <= 0) return absl::OkStatus();
  const int64_t blocks = std::min<int64_t>((count + 255) / 256, 65536);
  internal::LaunchKernel(FillUniformKernel<T>, static_cast<unsigned>(blocks), 256, 0, stream, dst,
                         count, seed, lo, hi - lo);
  return LaunchStatus("FillUniformKernel launch");
}

}  // namespace

absl::Status FillUniform(float* dst, int64_t count, uint64_t seed, float lo, float hi,
                         cudaStream_t stream) {
  return Fill(dst, count, seed, lo, hi, stream);
}

absl::Status FillUniform(uint16_t* dst, int64_t count, uint64_t seed, float lo, float hi,
                         cudaStream_t stream) {
  return Fill(dst, count, seed, lo, hi, stream);
}

}  // namespace strata::kernels::cuda
