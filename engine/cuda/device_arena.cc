#include "engine/cuda/device_arena.h"

#include <algorithm>

namespace strata::engine::cuda {
namespace {

constexpr int64_t kAlignBytes = 256;

int64_t AlignUp(int64_t bytes) { return (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }

}  // namespace

absl::StatusOr<void*> DeviceArena::TakeBytes(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("DeviceArena: negative size");
  const int64_t size = AlignUp(std::max<int64_t>(bytes, 1));
  if (chunks_.empty() || used_in_last_ + size > chunks_.back().bytes()) {
    const int64_t chunk = std::max(size, min_chunk_bytes_);
    absl::StatusOr<kernels::cuda::DeviceBuffer> b =
        kernels::cuda::DeviceBuffer::Allocate(chunk, "forward scratch");
    if (!b.ok()) return b.status();
    chunks_.push_back(std::move(*b));
    used_in_last_ = 0;
  }
  void* p = chunks_.back().as<char>() + used_in_last_;
  used_in_last_ += size;
  used_total_ += size;
  high_water_ = std::max(high_water_, used_total_);
  return p;
}

absl::Status DeviceArena::Reset() {
  if (chunks_.size() > 1) {
    chunks_.clear();
    absl::StatusOr<kernels::cuda::DeviceBuffer> b =
        kernels::cuda::DeviceBuffer::Allocate(AlignUp(high_water_), "forward scratch");
    if (!b.ok()) return b.status();
    chunks_.push_back(std::move(*b));
  }
  used_in_last_ = 0;
  used_total_ = 0;
  return absl::OkStatus();
}

int64_t DeviceArena::capacity_bytes() const {
  int64_t total = 0;
  for (const kernels::cuda::DeviceBuffer& b : chunks_) total += b.bytes();
  return total;
}

}  // namespace strata::engine::cuda
