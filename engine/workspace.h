// Scratch memory for forward passes: bump allocation out of blocks that are kept from one call
// to the next, so a steady-state decode step never touches the heap.
//
// Usage: a function that needs temporaries opens a WorkspaceScope; everything it takes from the
// workspace is released when the scope closes (allocations nest like a stack). Pointers stay
// valid until their scope closes. When a pass needed more than the first block, the blocks are
// merged into one block of the high-water size once the outermost scope closes, so the next
// pass of the same shape allocates nothing.
//
// Thread-safety: none; one workspace per forward (per engine loop). Kernels that parallelise
// take their per-thread scratch elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace strata::engine {

class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // `count` uninitialised elements of a trivial type, 64-byte aligned.
  template <typename T>
  T* Array(int64_t count) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 64);
    return static_cast<T*>(Take(static_cast<size_t>(count) * sizeof(T)));
  }
  float* Floats(int64_t count) { return Array<float>(count); }

  // Bytes reserved in blocks now, and how many blocks were ever allocated (tests use it to
  // check that a repeated pass allocates nothing).
  size_t capacity_bytes() const;
  int64_t num_block_allocations() const { return num_block_allocations_; }

 private:
  friend class WorkspaceScope;
  struct Mark {
    size_t block = 0;
    size_t offset = 0;
    size_t in_use = 0;
  };
  void* Take(size_t bytes);
  Mark mark() const { return {current_, offset_, in_use_}; }
  void Rewind(const Mark& m);

  std::vector<AlignedBuffer> blocks_;
  size_t current_ = 0;  // index of the block being filled
  size_t offset_ = 0;   // bytes used in blocks_[current_]
  size_t in_use_ = 0;   // bytes handed out by open scopes, all blocks
  size_t high_water_ = 0;
  int depth_ = 0;
  int64_t num_block_allocations_ = 0;
};

// Releases what was taken from the workspace since construction.
class WorkspaceScope {
 public:
  explicit WorkspaceScope(Workspace& ws) : ws_(ws), mark_(ws.mark()) { ++ws_.depth_; }
  ~WorkspaceScope() {
    --ws_.depth_;
    ws_.Rewind(mark_);
  }
  WorkspaceScope(const WorkspaceScope&) = delete;
  WorkspaceScope& operator=(const WorkspaceScope&) = delete;

 private:
  Workspace& ws_;
  Workspace::Mark mark_;
};

}  // namespace strata::engine
