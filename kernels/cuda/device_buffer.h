// Owned CUDA memory: device memory (cudaMalloc) and page-locked host memory (cudaMallocHost,
// what asynchronous copies need). Move-only; freed on destruction. Allocation failures are
// statuses naming what was being allocated and how many bytes.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::kernels::cuda {

enum class MemoryKind { kDevice, kPinnedHost };

template <MemoryKind kKind>
class CudaMemory {
 public:
  CudaMemory() = default;
  // `what` names the allocation in the error ("the caches", "logits (host)").
  static absl::StatusOr<CudaMemory> Allocate(int64_t bytes, const char* what);
  // Grows to at least `bytes` (with 50 % slack, at least 4 KiB) when smaller; the contents are
  // not kept. Buffers reused every step grow to the largest step and then stop allocating.
  absl::Status Reserve(int64_t bytes, const char* what);
  CudaMemory(CudaMemory&& other) noexcept;
  CudaMemory& operator=(CudaMemory&& other) noexcept;
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  ~CudaMemory() { Free(); }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  void Free();
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

using DeviceBuffer = CudaMemory<MemoryKind::kDevice>;
using PinnedBuffer = CudaMemory<MemoryKind::kPinnedHost>;

extern template class CudaMemory<MemoryKind::kDevice>;
extern template class CudaMemory<MemoryKind::kPinnedHost>;

// Free and total memory of the current device, bytes.
struct DeviceMemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};
absl::StatusOr<DeviceMemoryInfo> QueryDeviceMemory();

}  // namespace strata::kernels::cuda
