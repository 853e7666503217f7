#include "kvcache/prefix_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace strata::kvcache {

namespace {
int32_t NumIds(int32_t num_own, const StateSlotPool* lender) {
  return num_own + (lender != nullptr && num_own > 0 ? lender->num_slots() : 0);
}
}  // namespace

PrefixCache::PrefixCache(BlockPool* pool, int32_t num_checkpoint_slots,
                         int checkpoint_every_n_blocks, int block_size, bool needs_checkpoints,
                         StateSlotPool* lender)
    : pool_(pool),
      every_n_blocks_(checkpoint_every_n_blocks),
      block_size_(block_size),
      needs_checkpoints_(needs_checkpoints),
      num_own_(num_checkpoint_slots),
      lender_(num_checkpoint_slots > 0 ? lender : nullptr),
      states_(static_cast<size_t>(NumIds(num_checkpoint_slots, lender)), State::kFree),
      hashes_(static_cast<size_t>(NumIds(num_checkpoint_slots, lender)), 0),
      cold_(static_cast<size_t>(NumIds(num_checkpoint_slots, lender)), 0),
      lru_(NumIds(num_checkpoint_slots, lender)) {
  CHECK(pool != nullptr);
  CHECK_GE(num_checkpoint_slots, 0);
  CHECK_GE(checkpoint_every_n_blocks, 0);
  CHECK_GT(block_size, 0);
  free_.reserve(static_cast<size_t>(num_checkpoint_slots));
  for (CheckpointId id = num_checkpoint_slots - 1; id >= 0; --id) free_.push_back(id);
  pool_->SetEvictionCallback([this](BlockId block, BlockHash hash) {
    Spill(CacheEviction::Unit::kBlock, hash, block);
    OnBlockEvicted(hash);
  });
}

PrefixCache::~PrefixCache() { pool_->SetEvictionCallback(nullptr); }

PrefixMatch PrefixCache::Lookup(const std::vector<BlockHash>& block_hashes) const {
  PrefixMatch match;
  size_t usable = 0;  // blocks [0, usable) form the best hit so far
  std::vector<BlockId> chain;
  chain.reserve(block_hashes.size());
  for (BlockHash hash : block_hashes) {
    std::optional<BlockId> block = pool_->FindCached(hash);
    if (!block) break;
    chain.push_back(*block);
    if (!needs_checkpoints_) {
      usable = chain.size();
      continue;
    }
    if (std::optional<CheckpointId> id = FindCheckpoint(hash)) {
      usable = chain.size();
      match.checkpoint = *id;
    }
  }
  match.num_chain_tokens = static_cast<int64_t>(chain.size()) * block_size_;
  chain.resize(usable);
  match.blocks = std::move(chain);
  match.num_tokens = static_cast<int64_t>(usable) * block_size_;
  ++stats_.num_queries;
  stats_.num_query_tokens += static_cast<int64_t>(block_hashes.size()) * block_size_;
  if (usable > 0) {
    ++stats_.num_hits;
    stats_.num_hit_tokens += match.num_tokens;
  }
  return match;
}

void PrefixCache::Acquire(const PrefixMatch& match) {
  CHECK_EQ(match.num_tokens, static_cast<int64_t>(match.blocks.size()) * block_size_);
  for (BlockId b : match.blocks) CHECK(pool_->is_cached(b)) << "stale match: block " << b;
  if (needs_checkpoints_ && !match.blocks.empty()) CHECK_GE(match.checkpoint, 0);
  pool_->Touch(match.blocks);
  if (match.checkpoint >= 0) {
    CHECK(match.checkpoint < num_checkpoint_ids() && states_[match.checkpoint] == State::kCommitted)
        << "stale match: checkpoint " << match.checkpoint;
    MoveToHotEnd(match.checkpoint);
    acquired_.push_back(match.checkpoint);
  }
}

bool PrefixCache::ShouldCheckpoint(int64_t num_tokens_after_step, int64_t prompt_len) const {
  if (!keeps_checkpoints()) return false;
  if (num_tokens_after_step <= 0 || num_tokens_after_step % block_size_ != 0) return false;
  if (IsStrideBoundary(num_tokens_after_step)) return true;
  return IsPromptEnd(num_tokens_after_step, prompt_len);
}

std::vector<int64_t> PrefixCache::CheckpointBoundaries(int64_t begin_tokens, int64_t end_tokens,
                                                       int64_t prompt_len) const {
  std::vector<int64_t> boundaries;
  CheckpointBoundaries(begin_tokens, end_tokens, prompt_len, &boundaries);
  return boundaries;
}

void PrefixCache::CheckpointBoundaries(int64_t begin_tokens, int64_t end_tokens, int64_t prompt_len,
                                       std::vector<int64_t>* out) const {
  std::vector<int64_t>& boundaries = *out;
  boundaries.clear();
  if (!keeps_checkpoints() || end_tokens <= begin_tokens) return;
  if (every_n_blocks_ > 0) {
    int64_t stride = static_cast<int64_t>(every_n_blocks_) * block_size_;
    for (int64_t b = (begin_tokens / stride + 1) * stride; b <= end_tokens; b += stride) {
      boundaries.push_back(b);
    }
  }
  // The prompt's last block boundary, and the last one before its last token (they differ for
  // a block-aligned prompt: the same prompt again can only match up to the latter).
  for (int64_t prompt_end : {prompt_len / block_size_ * block_size_,
                             prompt_len > 0 ? (prompt_len - 1) / block_size_ * block_size_ : 0}) {
    if (prompt_end > begin_tokens && prompt_end <= end_tokens && prompt_end > 0 &&
        !std::binary_search(boundaries.begin(), boundaries.end(), prompt_end)) {
      boundaries.insert(std::lower_bound(boundaries.begin(), boundaries.end(), prompt_end),
                        prompt_end);
    }
  }
}

std::optional<CheckpointId> PrefixCache::ReserveCheckpoint(BlockHash boundary_hash,
                                                           bool evict_warm) {
  if (!keeps_checkpoints() || by_hash_.contains(boundary_hash)) return std::nullopt;
  std::optional<CheckpointId> free = TakeFreeSlot();
  if (!free.has_value()) {
    if (lru_.empty()) return std::nullopt;  // every slot is pending
    if (!evict_warm && !cold_[lru_.Front()]) return std::nullopt;
    Evict(lru_.Front());
    ++stats_.num_checkpoints_evicted;
    free = TakeFreeSlot();
    CHECK(free.has_value());
  }
  const CheckpointId id = *free;
  states_[id] = State::kPending;
  hashes_[id] = boundary_hash;
  by_hash_.emplace(boundary_hash, id);
  ++num_pending_;
  return id;
}

std::optional<CheckpointId> PrefixCache::TakeFreeSlot() {
  if (!free_.empty()) {
    const CheckpointId id = free_.back();
    free_.pop_back();
    return id;
  }
  if (lender_ == nullptr) return std::nullopt;
  const std::optional<SlotId> slot = lender_->Allocate();
  if (!slot.has_value()) return std::nullopt;
  ++num_lent_;
  return num_own_ + *slot;
}

bool PrefixCache::ReturnLentSlot(CheckpointId keep) {
  if (num_lent_ == 0) return false;
  for (CheckpointId id = lru_.Front(); id != internal::IndexList::kNone; id = lru_.Next(id)) {
    if (!is_lent(id) || id == keep ||
        std::find(acquired_.begin(), acquired_.end(), id) != acquired_.end()) {
      continue;
    }
    Evict(id);
    ++stats_.num_checkpoints_evicted;
    return true;
  }
  return false;
}

bool PrefixCache::CommitCheckpoint(CheckpointId id) {
  CHECK(id >= 0 && id < num_checkpoint_ids() && states_[id] == State::kPending)
      << "checkpoint " << id << " is not pending";
  if (!pool_->FindCached(hashes_[id])) {
    Release(id);
    ++stats_.num_checkpoints_invalidated;
    return false;
  }
  states_[id] = State::kCommitted;
  --num_pending_;
  lru_.PushBack(id);
  cold_[id] = 0;
  ++stats_.num_checkpoints_committed;
  return true;
}

void PrefixCache::CancelCheckpoint(CheckpointId id) {
  CHECK(id >= 0 && id < num_checkpoint_ids() && states_[id] == State::kPending)
      << "checkpoint " << id << " is not pending";
  Release(id);
}

std::optional<CheckpointId> PrefixCache::FindCheckpoint(BlockHash boundary_hash) const {
  auto it = by_hash_.find(boundary_hash);
  if (it == by_hash_.end() || states_[it->second] != State::kCommitted) return std::nullopt;
  return it->second;
}

void PrefixCache::Demote(BlockHash boundary_hash) {
  if (const std::optional<CheckpointId> id = FindCheckpoint(boundary_hash)) {
    lru_.Remove(*id);
    lru_.PushFront(*id);
    cold_[*id] = 1;
  }
}

void PrefixCache::Promote(BlockHash boundary_hash) {
  if (const std::optional<CheckpointId> id = FindCheckpoint(boundary_hash)) MoveToHotEnd(*id);
}

void PrefixCache::MoveToHotEnd(CheckpointId id) {
  lru_.Remove(id);
  lru_.PushBack(id);
  cold_[id] = 0;
}

void PrefixCache::Drop(BlockHash boundary_hash) {
  if (const std::optional<CheckpointId> id = FindCheckpoint(boundary_hash)) Release(*id);
}

bool PrefixCache::IsPromptEnd(int64_t boundary, int64_t prompt_len) const {
  return boundary > 0 &&
         (boundary == prompt_len / block_size_ * block_size_ ||
          (prompt_len > 0 && boundary == (prompt_len - 1) / block_size_ * block_size_));
}

bool PrefixCache::IsStrideBoundary(int64_t boundary) const {
  const int64_t stride = static_cast<int64_t>(every_n_blocks_) * block_size_;
  return every_n_blocks_ > 0 && boundary > 0 && boundary % stride == 0;
}

double PrefixCache::hit_rate() const {
  if (stats_.num_query_tokens == 0) return 0.0;
  return static_cast<double>(stats_.num_hit_tokens) / static_cast<double>(stats_.num_query_tokens);
}

void PrefixCache::OnBlockEvicted(BlockHash hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end() || states_[it->second] != State::kCommitted) return;
  Evict(it->second);
  ++stats_.num_checkpoints_invalidated;
}

void PrefixCache::Evict(CheckpointId id) {
  CHECK(states_[id] == State::kCommitted);
  Spill(CacheEviction::Unit::kCheckpoint, hashes_[id], id);
  Release(id);
}

void PrefixCache::Spill(CacheEviction::Unit unit, BlockHash hash, int32_t index) const {
  if (on_spill_ && !spills_suspended_) on_spill_(CacheEviction{unit, hash, index});
}

void PrefixCache::Release(CheckpointId id) {
  CHECK(states_[id] != State::kFree);
  if (states_[id] == State::kCommitted) {
    lru_.Remove(id);
  } else {
    --num_pending_;
  }
  by_hash_.erase(hashes_[id]);
  states_[id] = State::kFree;
  if (is_lent(id)) {
    lender_->Free(id - num_own_);
    --num_lent_;
  } else {
    free_.push_back(id);
  }
}

absl::Status PrefixCache::CheckInvariants() const {
  int32_t num_free = 0, num_pending = 0, num_committed = 0, num_lent = 0;
  for (CheckpointId id = 0; id < num_checkpoint_ids(); ++id) {
    State state = states_[id];
    bool in_lru = lru_.Contains(id);
    if (in_lru != (state == State::kCommitted)) {
      return absl::InternalError(absl::StrCat("checkpoint ", id, " LRU membership wrong"));
    }
    if (state == State::kFree) {
      num_free += is_lent(id) ? 0 : 1;
      continue;
    }
    if (is_lent(id)) {
      ++num_lent;
      if (!lender_->is_allocated(id - num_own_)) {
        return absl::InternalError(
            absl::StrCat("checkpoint ", id, " holds live slot ", id - num_own_, " unallocated"));
      }
    }
    if (state == State::kPending) {
      ++num_pending;
    } else {
      ++num_committed;
    }
    auto it = by_hash_.find(hashes_[id]);
    if (it == by_hash_.end() || it->second != id) {
      return absl::InternalError(absl::StrCat("checkpoint ", id, " missing from the map"));
    }
    if (state == State::kCommitted && !pool_->FindCached(hashes_[id])) {
      return absl::InternalError(absl::StrCat("checkpoint ", id, " outlived its boundary block"));
    }
  }
  std::vector<uint8_t> seen(states_.size(), 0);
  for (CheckpointId id : free_) {
    if (id < 0 || id >= num_own_ || states_[id] != State::kFree || seen[id]) {
      return absl::InternalError(absl::StrCat("free checkpoint list corrupt at ", id));
    }
    seen[id] = 1;
  }
  if (num_free != static_cast<int32_t>(free_.size()) || num_pending != num_pending_ ||
      num_lent != num_lent_ || num_committed != lru_.size() ||
      static_cast<int32_t>(by_hash_.size()) != num_pending + num_committed) {
    return absl::InternalError("checkpoint counts disagree");
  }
  return absl::OkStatus();
}

}  // namespace strata::kvcache
