// Device scratch for one step of the CUDA forward: a bump allocator over device memory, reset
// after every step (once the stream has finished with it). Sizes are not known in advance (they
// depend on the batch), so a request past the current chunk allocates another chunk; at the
// next Reset the chunks are merged into one of the high-water size, so steady state performs no
// allocation at all.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/device_buffer.h"

namespace strata::engine::cuda {

class DeviceArena {
 public:
  // Chunks are at least `min_chunk_bytes` (a step's scratch: 64 MiB; a captured graph's, whose
  // arena is never reset: small).
  explicit DeviceArena(int64_t min_chunk_bytes = int64_t{64} << 20)
      : min_chunk_bytes_(min_chunk_bytes) {}

  // Device memory for `count` values of T, 256-byte aligned, valid until Reset.
  template <typename T>
  absl::StatusOr<T*> Take(int64_t count) {
    absl::StatusOr<void*> p = TakeBytes(count * static_cast<int64_t>(sizeof(T)));
    if (!p.ok()) return p.status();
    return static_cast<T*>(*p);
  }
  absl::StatusOr<void*> TakeBytes(int64_t bytes);

  // Frees everything taken. The caller must have synchronised with the work that used it.
  // Merges the chunks of the last step into one (may free and allocate device memory).
  absl::Status Reset();

  int64_t capacity_bytes() const;
  int64_t high_water_bytes() const { return high_water_; }

 private:
  int64_t min_chunk_bytes_;
  std::vector<kernels::cuda::DeviceBuffer> chunks_;
  int64_t used_in_last_ = 0;  // bytes taken from chunks_.back()
  int64_t used_total_ = 0;    // bytes taken this step (with alignment)
  int64_t high_water_ = 0;
};

}  // namespace strata::engine::cuda
