#include "kernels/cuda/device_buffer.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata::kernels::cuda {

template <MemoryKind kKind>
absl::StatusOr<CudaMemory<kKind>> CudaMemory<kKind>::Allocate(int64_t bytes, const char* what) {
  CudaMemory m;
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("negative size for ", what));
  if (bytes == 0) return m;
  const bool device = kKind == MemoryKind::kDevice;
  const cudaError_t err = device ? cudaMalloc(&m.ptr_, static_cast<size_t>(bytes))
                                 : cudaMallocHost(&m.ptr_, static_cast<size_t>(bytes));
  if (err != cudaSuccess) {
    m.ptr_ = nullptr;
    cudaGetLastError();  // clear it: an out-of-memory error is not sticky
    return absl::ResourceExhaustedError(absl::StrCat(device ? "cudaMalloc" : "cudaMallocHost",
                                                     " of ", bytes, " bytes for ", what,
                                                     " failed: ", cudaGetErrorString(err)));
  }
  m.bytes_ = bytes;
  return m;
}

template <MemoryKind kKind>
absl::Status CudaMemory<kKind>::Reserve(int64_t bytes, const char* what) {
  if (bytes_ >= bytes) return absl::OkStatus();
  Free();  // first: the old and new sizes need not fit together
  absl::StatusOr<CudaMemory> grown = Allocate(std::max<int64_t>(bytes * 3 / 2, 4096), what);
  if (!grown.ok()) return grown.status();
  *this = std::move(*grown);
  return absl::OkStatus();
}

template <MemoryKind kKind>
CudaMemory<kKind>::CudaMemory(CudaMemory&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

template <MemoryKind kKind>
CudaMemory<kKind>& CudaMemory<kKind>::operator=(CudaMemory&& other) noexcept {
  if (this != &other) {
    Free();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

template <MemoryKind kKind>
void CudaMemory<kKind>::Free() {
  if (ptr_ == nullptr) return;
  if constexpr (kKind == MemoryKind::kDevice) {
    cudaFree(ptr_);
  } else {
    cudaFreeHost(ptr_);
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

template class CudaMemory<MemoryKind::kDevice>;
template class CudaMemory<MemoryKind::kPinnedHost>;

absl::StatusOr<DeviceMemoryInfo> QueryDeviceMemory() {
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("cudaMemGetInfo failed: ", cudaGetErrorString(err)));
  }
  return DeviceMemoryInfo{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

}  // namespace strata::kernels::cuda
