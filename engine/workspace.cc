#include "engine/workspace.h"

#include <algorithm>

namespace strata::engine {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMinBlockBytes = size_t{1} << 20;

size_t RoundUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

size_t Workspace::capacity_bytes() const {
  size_t total = 0;
  for (const AlignedBuffer& b : blocks_) total += b.size();
  return total;
}

void* Workspace::Take(size_t bytes) {
  bytes = RoundUp(std::max<size_t>(bytes, 1));
  while (current_ < blocks_.size() && offset_ + bytes > blocks_[current_].size()) {
    ++current_;
    offset_ = 0;
  }
  if (current_ == blocks_.size()) {
    blocks_.emplace_back(std::max(kMinBlockBytes, bytes));
    ++num_block_allocations_;
    offset_ = 0;
  }
  void* p = blocks_[current_].as<char>() + offset_;
  offset_ += bytes;
  in_use_ += bytes;
  high_water_ = std::max(high_water_, in_use_);
  return p;
}

void Workspace::Rewind(const Mark& m) {
  current_ = m.block;
  offset_ = m.offset;
  in_use_ = m.in_use;
  // Outermost scope closed with several blocks: merge into one of the high-water size (plus
  // the padding lost at block ends) so the next pass of this size fits in one block.
  if (depth_ == 0 && in_use_ == 0 && blocks_.size() > 1) {
    const size_t merged = RoundUp(high_water_ + high_water_ / 8);
    blocks_.clear();
    blocks_.emplace_back(merged);
    ++num_block_allocations_;
    current_ = 0;
    offset_ = 0;
  }
}

}  // namespace strata::engine
