#include "kernels/cuda/device.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>

namespace strata::kernels::cuda {

int VisibleDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

std::string DescribeDevice(int index) {
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  char tail[64];
  std::snprintf(tail, sizeof(tail), " (sm_%d%d, %.0f GiB)", prop.major, prop.minor,
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return std::string(prop.name) + tail;
}

int NcclVersion() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 0;
  return version;
}

}  // namespace strata::kernels::cuda
