#include "kernels/cuda/wgmma.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

namespace strata::kernels::cuda {

bool WgmmaAvailable() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9;
}

bool WgmmaChosen() {
  static const bool chosen = [] {
    const char* env = std::getenv("STRATA_CUDA_WGMMA");
    if (env != nullptr && (std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0)) {
      return env[0] == '1';
    }
#if defined(STRATA_CUDA_EMU)
    return true;
#else
    return false;
#endif
  }();
  return chosen && WgmmaAvailable();
}

}  // namespace strata::kernels::cuda
