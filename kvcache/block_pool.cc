#include "kvcache/block_pool.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace strata::kvcache {

BlockPool::BlockPool(int32_t num_blocks)
    : ref_counts_(static_cast<size_t>(num_blocks), 0),
      hashes_(static_cast<size_t>(num_blocks), 0),
      has_hash_(static_cast<size_t>(num_blocks), 0),
      free_queue_(num_blocks) {
  CHECK_GE(num_blocks, 0);
  for (BlockId b = 0; b < num_blocks; ++b) free_queue_.PushBack(b);
}

void BlockPool::CheckId(BlockId block) const {
  CHECK(block >= 0 && block < num_blocks()) << "block " << block << " of " << num_blocks();
}

std::optional<std::vector<BlockId>> BlockPool::Allocate(int32_t n) {
  CHECK_GE(n, 0);
  if (n > num_free()) return std::nullopt;
  std::vector<BlockId> blocks(static_cast<size_t>(n));
  for (BlockId& b : blocks) {
    b = free_queue_.PopFront();
    ref_counts_[b] = 1;
  }
  for (BlockId b : blocks) {
    if (!has_hash_[b]) continue;
    BlockHash hash = hashes_[b];
    cached_.erase(hash);
    has_hash_[b] = 0;
    ++num_evictions_;
    if (on_evict_) on_evict_(b, hash);
  }
  return blocks;
}

void BlockPool::Free(absl::Span<const BlockId> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    BlockId b = *it;
    CheckId(b);
    CHECK_GT(ref_counts_[b], 0) << "double free of block " << b;
    if (--ref_counts_[b] > 0) continue;
    if (has_hash_[b]) {
      free_queue_.PushBack(b);
    } else {
      free_queue_.PushFront(b);
    }
  }
}

void BlockPool::Touch(const std::vector<BlockId>& blocks) {
  for (BlockId b : blocks) {
    CheckId(b);
    if (ref_counts_[b] == 0) {
      CHECK(has_hash_[b]) << "Touch of free uncached block " << b;
      free_queue_.Remove(b);
    }
    ++ref_counts_[b];
  }
}

bool BlockPool::CacheFullBlock(BlockId block, BlockHash hash) {
  CheckId(block);
  CHECK_GT(ref_counts_[block], 0) << "only a held block can be cached: " << block;
  if (has_hash_[block]) {
    CHECK_EQ(hashes_[block], hash) << "block " << block << " is cached under another hash";
    return true;
  }
  auto [it, inserted] = cached_.try_emplace(hash, block);
  if (!inserted) return false;
  hashes_[block] = hash;
  has_hash_[block] = 1;
  return true;
}

std::optional<BlockId> BlockPool::FindCached(BlockHash hash) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

int32_t BlockPool::DropCachedFreeBlocks() {
  int32_t dropped = 0;
  for (BlockId b = free_queue_.Front(); b != internal::IndexList::kNone; b = free_queue_.Next(b)) {
    if (!has_hash_[b]) continue;
    BlockHash hash = hashes_[b];
    cached_.erase(hash);
    has_hash_[b] = 0;
    ++dropped;
    if (on_evict_) on_evict_(b, hash);
  }
  // Uncached free blocks belong at the front; the queue now holds only uncached blocks, so
  // its order is merely reuse order and needs no change.
  return dropped;
}

int32_t BlockPool::CountFree(const std::vector<BlockId>& blocks) const {
  int32_t count = 0;
  for (BlockId b : blocks) {
    CheckId(b);
    count += ref_counts_[b] == 0 ? 1 : 0;
  }
  return count;
}

double BlockPool::usage() const {
  if (num_blocks() == 0) return 0.0;
  return static_cast<double>(num_held()) / static_cast<double>(num_blocks());
}

int32_t BlockPool::ref_count(BlockId block) const {
  CheckId(block);
  return ref_counts_[block];
}

bool BlockPool::is_cached(BlockId block) const {
  CheckId(block);
  return has_hash_[block] != 0;
}

std::optional<BlockHash> BlockPool::block_hash(BlockId block) const {
  CheckId(block);
  if (!has_hash_[block]) return std::nullopt;
  return hashes_[block];
}

absl::Status BlockPool::CheckInvariants() const {
  int32_t walked = 0;
  bool seen_cached = false;
  for (BlockId b = free_queue_.Front(); b != internal::IndexList::kNone; b = free_queue_.Next(b)) {
    if (++walked > num_blocks()) return absl::InternalError("free queue has a cycle");
    if (ref_counts_[b] != 0) {
      return absl::InternalError(
          absl::StrCat("block ", b, " is in the free queue with ref_count ", ref_counts_[b]));
    }
    if (seen_cached && !has_hash_[b]) {
      return absl::InternalError(
          absl::StrCat("uncached free block ", b, " is queued behind a cached one"));
    }
    seen_cached = seen_cached || has_hash_[b];
  }
  if (walked != free_queue_.size()) {
    return absl::InternalError(
        absl::StrCat("free queue walk ", walked, " != size ", free_queue_.size()));
  }
  int32_t num_with_hash = 0;
  for (BlockId b = 0; b < num_blocks(); ++b) {
    if (ref_counts_[b] < 0) return absl::InternalError(absl::StrCat("negative ref ", b));
    if ((ref_counts_[b] == 0) != free_queue_.Contains(b)) {
      return absl::InternalError(absl::StrCat("block ", b, " ref_count ", ref_counts_[b],
                                              " but in_free_queue=", free_queue_.Contains(b)));
    }
    if (!has_hash_[b]) continue;
    ++num_with_hash;
    auto it = cached_.find(hashes_[b]);
    if (it == cached_.end() || it->second != b) {
      return absl::InternalError(absl::StrCat("block ", b, " has a hash the map lacks"));
    }
  }
  if (num_with_hash != num_cached()) {
    return absl::InternalError(absl::StrCat("cache map has ", num_cached(), " entries but ",
                                            num_with_hash, " blocks have hashes"));
  }
  return absl::OkStatus();
}

}  // namespace strata::kvcache
