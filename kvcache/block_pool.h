// BlockPool: the MLA latent page allocator with reference counts and a prefix cache of full
// blocks (vLLM v1's design, written for Strata).
//
// Every block is in exactly one of two states:
//   held  ref_count > 0: in the block table of >= 1 live sequence; not in the free queue.
//   free  ref_count == 0: in the free queue. A free block may still be *cached* (it keeps the
//         hash of the full block it holds) and can be revived by a prefix hit (Touch) until
//         Allocate reuses it; that is the only moment a cached block is evicted (lazy LRU).
//
// Free queue order = eviction order; Allocate pops from the front.
//
//     front (evicted / reused first)                                    back (kept longest)
//     [uncached free blocks ...][cached blocks, least recently freed ... most recently freed]
//
//   * A block reaching ref 0 that is cached goes to the back; one that is not cached (it holds
//     nothing reusable, e.g. a partial last block) goes to the front, so it is reused before
//     any cached block. (vLLM puts both at the back; reusing empty blocks first keeps more of
//     the cache at no cost.)
//   * Free(table) releases a sequence's blocks last-to-first, so that, among its cached
//     blocks, the tail of a sequence is evicted before its prefix: a prefix is worth more
//     than its tail, and a hit needs the whole chain from block 0.
//
// Cache map: hash -> the one block registered under it. A second block with the same hash
// (two sequences computed the same prefix concurrently) is not registered and stays private.
//
// Not thread-safe: owned by the engine loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kvcache/ids.h"
#include "kvcache/internal/index_list.h"

namespace strata::kvcache {

class BlockPool {
 public:
  // Called when Allocate evicts a cached block (after the hash is removed from the map).
  // It must not call BlockPool's mutating methods.
  using EvictionCallback = std::function<void(BlockId block, BlockHash hash)>;

  // All blocks start free and uncached, queued in id order 0, 1, ..., num_blocks - 1.
  explicit BlockPool(int32_t num_blocks);

  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // Takes `n` >= 0 blocks from the front of the free queue, each with ref_count 1; a taken
  // cached block is evicted (loses its hash; the eviction callback runs). All or nothing:
  // nullopt (and no change) when fewer than n blocks are free.
  std::optional<std::vector<BlockId>> Allocate(int32_t n);

  // Drops one reference to each block (a sequence's block table, in sequence order). Blocks
  // reaching 0 are queued as described above, processing `blocks` from last to first.
  void Free(absl::Span<const BlockId> blocks);

  // A prefix hit: one more reference to each block; a free block leaves the free queue. A free
  // block must be cached (an uncached free block holds nothing valid).
  void Touch(const std::vector<BlockId>& blocks);

  // Registers a held block that now holds a full block of tokens whose chained hash is `hash`.
  // Returns true when `block` is (now or already) the block cached under `hash`; false when
  // another block already is (this one then stays uncached). A block's hash never changes
  // while it is cached.
  bool CacheFullBlock(BlockId block, BlockHash hash);

  // The block cached under `hash` (held or free), if any.
  std::optional<BlockId> FindCached(BlockHash hash) const;

  // Uncaches every free cached block (admin "reset prefix cache"); held blocks keep their
  // hashes. Runs the eviction callback for each. Returns how many were dropped.
  int32_t DropCachedFreeBlocks();

  // Calls f(block, hash) for every cached block (held or free), in no particular order.
  template <typename F>
  void ForEachCached(F f) const {
    for (const auto& [hash, block] : cached_) f(block, hash);
  }

  // One listener (the PrefixCache); pass nullptr to remove it.
  void SetEvictionCallback(EvictionCallback callback) { on_evict_ = std::move(callback); }

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  // Length of the free queue, cached or not.
  int32_t num_free() const { return free_queue_.size(); }
  int32_t num_held() const { return num_blocks() - num_free(); }
  // Blocks registered in the cache map (held or free).
  int32_t num_cached() const { return static_cast<int32_t>(cached_.size()); }
  // How many of `blocks` are free now (a Touch of them would take that many off the queue).
  int32_t CountFree(const std::vector<BlockId>& blocks) const;
  // Fraction of blocks held, in [0, 1] (0 for an empty pool).
  double usage() const;
  // Cached blocks evicted by Allocate since construction.
  int64_t num_evictions() const { return num_evictions_; }

  int32_t ref_count(BlockId block) const;
  bool is_cached(BlockId block) const;
  std::optional<BlockHash> block_hash(BlockId block) const;

  // Full consistency check (O(num_blocks)): free queue == {ref 0}, queue links, cache map
  // <-> per-block hashes. For tests and debug builds.
  absl::Status CheckInvariants() const;

 private:
  void CheckId(BlockId block) const;

  std::vector<int32_t> ref_counts_;  // [num_blocks]
  std::vector<BlockHash> hashes_;    // [num_blocks], valid where has_hash_
  std::vector<uint8_t> has_hash_;    // [num_blocks]
  internal::IndexList free_queue_;
  absl::flat_hash_map<BlockHash, BlockId> cached_;
  EvictionCallback on_evict_;
  int64_t num_evictions_ = 0;
};

}  // namespace strata::kvcache
