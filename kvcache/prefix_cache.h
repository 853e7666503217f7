// PrefixCache: prefix hits over the BlockPool's cached full blocks plus KDA checkpoints.
//
// KDA layers keep one recurrent state per sequence, updated in place, so a cached prefix is
// usable only where a copy of that state was saved: a *checkpoint* at a block boundary (all
// KDA layers' S and conv cache, one row per layer, see cache_layout.h). A prefix hit therefore
// needs both
//   * the MLA blocks of every full block of the prefix cached in the BlockPool, and
//   * a committed checkpoint at exactly the prefix's end boundary,
// and it *copies* the checkpoint into the sequence's private slot (a checkpoint is never a live
// slot and is never updated in place). For a model without KDA layers construct with
// needs_checkpoints = false: then any cached chain is a hit and no checkpoints are kept.
//
// Checkpoint placement (ShouldCheckpoint): a boundary of b tokens (b % block_size == 0, b > 0)
// is a checkpoint point when b is a multiple of checkpoint_every_n_blocks blocks (0 = never) or
// b is the last block boundary inside the prompt, floor(prompt_len / block_size) * block_size
// (so the next turn of a conversation finds the state at the end of this turn's prompt), or the
// last one before its last token, floor((prompt_len − 1) / block_size) * block_size (the most
// the same prompt can match, as n > 1 choices and repeated requests do: it differs from the
// former only for a block-aligned prompt).
//
// The scheduler adds two kinds of boundary of its own: branch points (where one request's
// prompt parts from another's, so the requests after them hit there) and, for a running
// sequence, its latest boundary past the prompt (Demoted while it runs, Promoted when it
// finishes, Dropped when superseded), where the conversation's next turn continues.
//
// Stride checkpoints of one long sequence can crowd out every other conversation's (a K3
// checkpoint is hundreds of MiB, so slots are few): the scheduler keeps only each sequence's
// latest few stride checkpoints in the normal LRU order and Demotes older ones to the cold end.
//
// Checkpoints live in `num_checkpoint_slots` slots under their own byte budget (the memory
// planner's share), keyed by the boundary's block hash. With a `lender` (the live StateSlotPool)
// they also borrow live slots no sequence holds: ids num_checkpoint_slots + s are live slot s's
// row (CacheLayout::CheckpointRow), taken only when every own slot is in use and handed back
// when an admission needs a slot and none is free (ReturnLentSlot) — so idle live-slot memory
// holds prefix states instead of nothing, as SGLang's shared Mamba pool does. States of a
// checkpoint slot:
//   free -> pending (ReserveCheckpoint; the executor writes it at the end of this step;
//           invisible to Lookup and never evicted) -> committed (CommitCheckpoint; visible,
//           LRU-ordered) -> free (LRU eviction by ReserveCheckpoint, invalidation, or
//           CancelCheckpoint of a pending one).
//
// A checkpoint never outlives the cached blocks it belongs to. Chosen design, both halves:
//   * eager: the BlockPool eviction callback drops the committed checkpoint whose boundary
//     block was evicted (its budget is reusable at once), and CommitCheckpoint drops a
//     checkpoint whose boundary block is not cached (any more);
//   * verified: Lookup walks the hash chain from block 0 and stops at the first block not
//     cached, so a checkpoint behind an evicted earlier block is unreachable (it then ages out
//     of the LRU list).
// Invariant (CheckInvariants): every committed checkpoint's boundary hash is cached in the pool.
//
// Use within one engine step (the scheduler drives it; the executor copies bytes):
//   Schedule()
//     admission: hashes = HashFullBlocks(prompt[0, prompt_len - 1), ...)  (leave >= 1 token to
//       compute); m = Lookup(hashes); Acquire(m) BEFORE any BlockPool::Allocate (Allocate may
//       evict m's free blocks); block_table = m.blocks; num_computed_tokens = m.num_tokens;
//       slot starts from checkpoint m.checkpoint (or fresh when -1). The copy must be in the
//       same step as the Acquire.
//     a step whose end (or, if the executor saves mid-step, some position in it) is a boundary
//       from CheckpointBoundaries(): id = ReserveCheckpoint(hash of the block ending there).
//   Execute(): all checkpoint -> slot copies, then the forward, which writes the slot ->
//     checkpoint copies as it passes each boundary (or all after it: either way after every
//     checkpoint -> slot copy, so reusing a checkpoint slot within one step is safe).
//   Commit(): BlockPool::CacheFullBlock for newly full blocks first, then CommitCheckpoint(id).
//     A sequence aborted or preempted between Reserve and Commit: CancelCheckpoint(id).
//
// Not thread-safe: owned by the engine loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "kvcache/block_pool.h"
#include "kvcache/ids.h"
#include "kvcache/internal/index_list.h"
#include "kvcache/state_slot_pool.h"

namespace strata::kvcache {

struct PrefixMatch {
  std::vector<BlockId> blocks;   // the matched full blocks, block 0 first
  int64_t num_tokens = 0;        // blocks.size() * block_size
  CheckpointId checkpoint = -1;  // state at num_tokens; -1 when no hit or no KDA layers
  // Tokens of the longest chain of cached blocks (>= num_tokens). Beyond num_tokens the
  // blocks are cached but no checkpoint ends there: the query shares that much with some
  // earlier request, and a checkpoint saved at its end would let the next one hit.
  int64_t num_chain_tokens = 0;
};

// What an eviction hands to the spill listener (SetSpillCallback): a cached full block or a
// committed checkpoint whose bytes are still in the cache and valid for `hash` until the next
// forward or copy writes its place (the executor copies spills out before anything else in a
// step: engine/step.h).
struct CacheEviction {
  enum class Unit : uint8_t { kBlock, kCheckpoint };
  Unit unit = Unit::kBlock;
  BlockHash hash = 0;  // the block's chained hash, or the checkpoint's boundary hash
  int32_t index = 0;   // BlockId, or CheckpointId
};

struct PrefixCacheStats {
  int64_t num_queries = 0;       // Lookup calls
  int64_t num_query_tokens = 0;  // tokens of the full blocks passed to Lookup
  int64_t num_hits = 0;          // Lookups that matched >= 1 block
  int64_t num_hit_tokens = 0;    // tokens those Lookups matched
  int64_t num_checkpoints_committed = 0;
  int64_t num_checkpoints_evicted = 0;      // LRU victims of ReserveCheckpoint
  int64_t num_checkpoints_invalidated = 0;  // boundary block evicted, or absent at commit
};

class PrefixCache {
 public:
  // `pool` (and `lender`, when given) must outlive this object; this object installs the pool's
  // eviction callback. checkpoint_every_n_blocks >= 0 (0: only prompt-end checkpoints). Without
  // own checkpoint slots nothing is borrowed either.
  PrefixCache(BlockPool* pool, int32_t num_checkpoint_slots, int checkpoint_every_n_blocks,
              int block_size, bool needs_checkpoints = true, StateSlotPool* lender = nullptr);
  ~PrefixCache();

  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The longest usable prefix of `block_hashes` (chained hashes of full blocks, block 0 first):
  // all its blocks cached and, when checkpoints are needed, a committed checkpoint at its end.
  // Changes no cache state (only the statistics).
  PrefixMatch Lookup(const std::vector<BlockHash>& block_hashes) const;

  // Takes the hit: BlockPool::Touch(match.blocks) and marks the checkpoint most recently used.
  // `match` must come from Lookup with no cache mutation in between. Its checkpoint is not handed
  // back to the lender until the next BeginStep (the executor copies it at the step's start, in
  // plan order, possibly after zeroing a slot it was lent).
  void Acquire(const PrefixMatch& match);
  // A new engine step is being scheduled: the previous step's hits are copied.
  void BeginStep() { acquired_.clear(); }

  // Whether the boundary after a step that leaves `num_tokens_after_step` tokens computed is a
  // checkpoint point (see the file comment). Always false when no checkpoints are kept.
  bool ShouldCheckpoint(int64_t num_tokens_after_step, int64_t prompt_len) const;
  // All checkpoint points b with begin_tokens < b <= end_tokens, ascending.
  std::vector<int64_t> CheckpointBoundaries(int64_t begin_tokens, int64_t end_tokens,
                                            int64_t prompt_len) const;
  // The same into *out (cleared first; its capacity is reused).
  void CheckpointBoundaries(int64_t begin_tokens, int64_t end_tokens, int64_t prompt_len,
                            std::vector<int64_t>* out) const;

  // A checkpoint slot to save the state at the boundary whose last block hashes to
  // `boundary_hash`, now pending. Evicts the least recently used committed checkpoint when no
  // slot is free — with `evict_warm` false only one Demoted since it was last used. nullopt
  // when no checkpoints are kept, a checkpoint (pending or committed) for this boundary
  // exists, or nothing may be evicted.
  std::optional<CheckpointId> ReserveCheckpoint(BlockHash boundary_hash, bool evict_warm = true);
  // Publishes a pending checkpoint whose state has been written. Returns false (and frees it)
  // when its boundary block is not cached in the pool (then it could never be hit).
  bool CommitCheckpoint(CheckpointId id);
  // Frees a pending checkpoint whose state will not be written.
  void CancelCheckpoint(CheckpointId id);
  // Frees the least recently used committed checkpoint in a borrowed live slot (not `keep`, not
  // acquired this step), handing the slot back to the lender. False when there is none.
  bool ReturnLentSlot(CheckpointId keep = -1);

  // A listener for what eviction takes out of the cache, so a lower tier can keep it
  // (kvcache/offload): every cached block Allocate evicts, and every committed checkpoint freed
  // for room or because its boundary block was evicted (not one Dropped, Cancelled, or reset by
  // the pool's DropCachedFreeBlocks while `suspended`). Called before the checkpoint is freed.
  using SpillCallback = std::function<void(const CacheEviction&)>;
  void SetSpillCallback(SpillCallback callback) { on_spill_ = std::move(callback); }
  // While true the listener is not called (an admin reset forgets instead of spilling).
  void SuspendSpills(bool suspended) { spills_suspended_ = suspended; }

  // Calls f(id, boundary_hash) for every committed checkpoint, least recently used first.
  template <typename F>
  void ForEachCommitted(F f) const {
    for (CheckpointId id = lru_.Front(); id != internal::IndexList::kNone; id = lru_.Next(id)) {
      f(id, hashes_[static_cast<size_t>(id)]);
    }
  }

  // The committed checkpoint at `boundary_hash`, if any (no LRU update).
  std::optional<CheckpointId> FindCheckpoint(BlockHash boundary_hash) const;
  // Moves the committed checkpoint at `boundary_hash` (if any) to the cold end of the LRU order:
  // the next eviction takes it, unless a hit touches it first.
  void Demote(BlockHash boundary_hash);
  // Moves it (if committed) to the hot end, as a hit would.
  void Promote(BlockHash boundary_hash);
  // Frees the committed checkpoint at `boundary_hash`, if any: one superseded by a later one.
  void Drop(BlockHash boundary_hash);
  // Whether boundary b is one of the prompt's own checkpoint points (its last block boundary or
  // the last one before its last token) rather than only a multiple of the every-N stride.
  bool IsPromptEnd(int64_t boundary, int64_t prompt_len) const;
  // Whether boundary b (> 0) is a multiple of the every-N-blocks stride.
  bool IsStrideBoundary(int64_t boundary) const;

  bool needs_checkpoints() const { return needs_checkpoints_; }
  int block_size() const { return block_size_; }
  int checkpoint_every_n_blocks() const { return every_n_blocks_; }
  int32_t num_checkpoint_slots() const { return num_own_; }  // the planner's, not lent ones
  // Valid checkpoint ids: [0, num_checkpoint_slots + lendable live slots).
  int32_t num_checkpoint_ids() const { return static_cast<int32_t>(states_.size()); }
  int32_t num_lent_slots() const { return num_lent_; }     // live slots holding checkpoints
  int32_t num_checkpoints() const { return lru_.size(); }  // committed
  int32_t num_pending_checkpoints() const { return num_pending_; }
  int32_t num_free_checkpoint_slots() const { return static_cast<int32_t>(free_.size()); }
  const PrefixCacheStats& stats() const { return stats_; }
  int64_t num_queries() const { return stats_.num_queries; }
  int64_t num_hits() const { return stats_.num_hits; }
  // Fraction of queried tokens that hit, in [0, 1].
  double hit_rate() const;

  absl::Status CheckInvariants() const;

 private:
  enum class State : uint8_t { kFree, kPending, kCommitted };

  bool keeps_checkpoints() const { return needs_checkpoints_ && num_own_ > 0; }
  bool is_lent(CheckpointId id) const { return id >= num_own_; }
  // A free own slot, else a live slot the lender can spare; nullopt when neither.
  std::optional<CheckpointId> TakeFreeSlot();
  void OnBlockEvicted(BlockHash hash);
  void Release(CheckpointId id);  // any state but free -> free (a lent slot back to the lender)
  // Release of a committed checkpoint that eviction takes: tells the spill listener first.
  void Evict(CheckpointId id);
  void Spill(CacheEviction::Unit unit, BlockHash hash, int32_t index) const;
  void MoveToHotEnd(CheckpointId id);  // a committed one: most recently used, not cold

  BlockPool* pool_;
  int every_n_blocks_;
  int block_size_;
  bool needs_checkpoints_;
  int32_t num_own_;
  StateSlotPool* lender_;  // may be null

  std::vector<State> states_;       // [num_checkpoint_slots]
  std::vector<BlockHash> hashes_;   // [num_checkpoint_slots], valid unless free
  std::vector<uint8_t> cold_;       // Demoted and not used since (committed ones)
  std::vector<CheckpointId> free_;  // own ids; stack; back() is reserved next
  internal::IndexList lru_;         // committed; front = least recently used
  absl::flat_hash_map<BlockHash, CheckpointId> by_hash_;  // pending and committed
  int32_t num_pending_ = 0;
  int32_t num_lent_ = 0;
  std::vector<CheckpointId> acquired_;  // hits of the step being scheduled
  mutable PrefixCacheStats stats_;
  SpillCallback on_spill_;
  bool spills_suspended_ = false;
};

}  // namespace strata::kvcache
