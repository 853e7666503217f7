// Kernel launches and dynamic shared memory, spelled once so the same kernels also build as
// host C++ under Strata's CUDA emulator (tests/cuda_emu, STRATA_CUDA_EMU) and run on a CPU in
// CI. Internal; include from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#if defined(STRATA_CUDA_EMU)
// The emulator hands each block its dynamic shared memory (16-byte aligned).
#define STRATA_DYNAMIC_SHARED(name) unsigned char* const name = ::strata_emu::DynamicShared()
#else
#define STRATA_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace strata::kernels::cuda::internal {

// The current device's multiprocessor count, for sizing grids (132, an H100/H200's, when the
// query fails).
inline int NumSms() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      sms <= 0) {
    cudaGetLastError();
    return 132;
  }
  return sms;
}

// kernel<<<grid, block, dynamic_smem_bytes, stream>>>(args...). Launch errors surface through
// cudaGetLastError() as with the triple-chevron form.
template <typename... Params, typename... Args>
void LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_smem_bytes,
                  cudaStream_t stream, Args&&... args) {
#if defined(STRATA_CUDA_EMU)
  ::strata_emu::Launch(kernel, ::strata_emu::LaunchConfig{grid, block, dynamic_smem_bytes, stream},
                       std::forward<Args>(args)...);
#else
  // clang-format off
  kernel<<<grid, block, dynamic_smem_bytes, stream>>>(std::forward<Args>(args)...);
  // clang-format on
#endif
}

}  // namespace strata::kernels::cuda::internal
