// The scheduler's side of the offload tiers (docs/kv-offload.md): what the prefix cache evicts
// goes down (a save in the plan, stored at Commit), and an admission whose prefix goes on in a
// tier loads it back (a load in the plan) — after reading it ahead when it is on disk.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "scheduler/scheduler.h"

namespace strata::scheduler {

using kvcache::OffloadKey;
using kvcache::OffloadKind;
using kvcache::OffloadTier;

void Scheduler::SetOffloadTiers(kvcache::OffloadTiers* tiers, int64_t block_bytes,
                                int64_t state_row_bytes) {
  CHECK(!in_flight_) << "SetOffloadTiers during a step";
  tiers_ = tiers;
  offload_block_bytes_ = block_bytes;
  offload_state_bytes_ = state_row_bytes;
  spills_.clear();
  if (tiers == nullptr) {
    prefix_cache_.SetSpillCallback(nullptr);
    return;
  }
  CHECK_GT(block_bytes, 0);
  CHECK(!config_.has_kda_layers || state_row_bytes > 0);
  prefix_cache_.SetSpillCallback(
      [this](const kvcache::CacheEviction& eviction) { spills_.push_back(eviction); });
}

bool Scheduler::FindTierHit(Sequence* seq, absl::Span<const kvcache::BlockHash> hashes,
                            const kvcache::PrefixMatch& match, TierHit* hit) {
  if (seq->skip_tiers) return false;
  const auto pending = [&](const OffloadKey& key) {
    return std::find(seq->tier_reads.begin(), seq->tier_reads.end(), key) != seq->tier_reads.end();
  };
  // Somewhere below the device: read already, being read, or in a tier.
  const auto below = [&](const OffloadKey& key) {
    return seq->tier_bytes.contains(key) || pending(key) ||
           tiers_->Contains(key) != OffloadTier::kNone;
  };
  // The longest chain of blocks cached on the device or below (the device's match is its start),
  // noting the device's blocks on the way; then the last boundary in it with a checkpoint (on the
  // device or below) when the model has KDA layers.
  hit->device.assign(match.blocks.begin(), match.blocks.end());
  while (hit->device.size() < hashes.size()) {
    const kvcache::BlockHash hash = hashes[hit->device.size()];
    const std::optional<kvcache::BlockId> cached = block_pool_.FindCached(hash);
    if (!cached.has_value() && !below(OffloadKey{hash, OffloadKind::kLatentBlock})) break;
    hit->device.push_back(cached.value_or(-1));
  }
  const size_t chain = hit->device.size();
  size_t end = config_.has_kda_layers ? 0 : chain;
  hit->checkpoint = -1;
  for (size_t j = chain; config_.has_kda_layers && j > match.blocks.size(); --j) {
    const std::optional<kvcache::CheckpointId> c = prefix_cache_.FindCheckpoint(hashes[j - 1]);
    if (c.has_value() || below(OffloadKey{hashes[j - 1], OffloadKind::kKdaCheckpoint})) {
      end = j;
      hit->checkpoint = c.value_or(-1);
      break;
    }
  }
  if (end <= match.blocks.size()) {  // the tiers add nothing to the device's hit
    ForgetTierReads(seq);
    return false;
  }
  hit->num_blocks = static_cast<int32_t>(end);
  hit->device.resize(end);
  return true;
}

Scheduler::TierLookup Scheduler::ReadTierHit(Sequence* seq,
                                             absl::Span<const kvcache::BlockHash> hashes,
                                             const TierHit& hit) {
  std::vector<OffloadKey> needed;
  for (int32_t i = 0; i < hit.num_blocks; ++i) {
    if (hit.device[static_cast<size_t>(i)] < 0) {
      needed.push_back(OffloadKey{hashes[static_cast<size_t>(i)], OffloadKind::kLatentBlock});
    }
  }
  if (config_.has_kda_layers && hit.checkpoint < 0) {
    needed.push_back(
        OffloadKey{hashes[static_cast<size_t>(hit.num_blocks - 1)], OffloadKind::kKdaCheckpoint});
  }
  const auto size_ok = [&](const OffloadKey& key, const std::string& bytes) {
    const int64_t want =
        key.kind == OffloadKind::kLatentBlock ? offload_block_bytes_ : offload_state_bytes_;
    return static_cast<int64_t>(bytes.size()) == want;
  };
  std::vector<OffloadKey> to_read;
  bool waiting = false;
  for (const OffloadKey& key : needed) {
    if (seq->tier_bytes.contains(key)) continue;
    if (auto it = std::find(seq->tier_reads.begin(), seq->tier_reads.end(), key);
        it != seq->tier_reads.end()) {
      TierRead& read = tier_reads_.at(key);
      if (!read.result.has_value()) read.result = tiers_->TakePrefetched(key);
      if (!read.result.has_value()) {
        waiting = true;
        continue;
      }
      const absl::StatusOr<std::string>& result = *read.result;
      if (!result.ok() || !size_ok(key, *result)) {
        LOG_WARN("kvoffload", "request {}: reading {} {:016x} failed ({}): computing it instead",
                 seq->request.request_id, kvcache::OffloadKindName(key.kind), key.hash,
                 result.ok() ? "wrong size" : result.status().ToString());
        return FailTierHit(seq);
      }
      seq->tier_bytes.emplace(key, *result);
      seq->tier_reads.erase(it);
      ReleaseTierRead(key);
      continue;
    }
    switch (tiers_->Contains(key)) {
      case OffloadTier::kHost: {
        std::optional<std::string> bytes = tiers_->Load(key);
        if (!bytes.has_value() || !size_ok(key, *bytes)) return FailTierHit(seq);
        seq->tier_bytes.emplace(key, std::move(*bytes));
        break;
      }
      case OffloadTier::kDisk: {
        TierRead& read = tier_reads_[key];
        if (read.waiters++ == 0) to_read.push_back(key);  // else another sequence asked already
        seq->tier_reads.push_back(key);
        waiting = true;
        break;
      }
      case OffloadTier::kNone:
        return FailTierHit(seq);  // gone since `below` saw it (cannot happen on one thread)
    }
  }
  if (!to_read.empty()) tiers_->Prefetch(to_read);
  return waiting ? TierLookup::kWait : TierLookup::kHit;
}

Scheduler::TierLookup Scheduler::FailTierHit(Sequence* seq) {
  ForgetTierReads(seq);
  seq->skip_tiers = true;
  ++counters_.num_tier_load_failures;
  return TierLookup::kNone;
}

void Scheduler::ForgetTierReads(Sequence* seq) {
  for (const OffloadKey& key : seq->tier_reads) ReleaseTierRead(key);
  seq->tier_reads.clear();
  seq->tier_bytes.clear();
}

void Scheduler::ReleaseTierRead(const OffloadKey& key) {
  auto it = tier_reads_.find(key);
  CHECK(it != tier_reads_.end()) << "a read nobody asked for";
  if (--it->second.waiters > 0) return;
  if (!it->second.result.has_value()) tiers_->CancelPrefetch(key);
  tier_reads_.erase(it);
}

void Scheduler::LoadFromTier(Sequence* seq, const OffloadKey& key, engine::CacheUnit unit,
                             int32_t index) {
  auto it = seq->tier_bytes.find(key);
  CHECK(it != seq->tier_bytes.end()) << "tier hit without the bytes of a unit";
  counters_.num_tier_loaded_bytes += static_cast<int64_t>(it->second.size());
  seq->pending_loads.push_back(engine::CacheLoad{unit, index, std::move(it->second)});
  seq->tier_bytes.erase(it);
}

bool Scheduler::IssueLoads(Sequence* seq, bool all) {
  const size_t first = plan_.cache_loads.size();
  while (seq->loading() && (all || load_budget_ > 0 || plan_.cache_loads.empty())) {
    load_budget_ -= static_cast<int64_t>(seq->pending_loads.back().bytes.size());
    plan_.cache_loads.push_back(std::move(seq->pending_loads.back()));
    seq->pending_loads.pop_back();
  }
  if (!seq->loading()) return true;
  for (size_t i = first; i < plan_.cache_loads.size(); ++i) plan_.cache_loads[i].beside_step = true;
  return false;
}

void Scheduler::DropPlannedLoads(const Sequence& seq) {
  std::erase_if(plan_.cache_loads, [&](const engine::CacheLoad& load) {
    if (load.unit == engine::CacheUnit::kSlot) return load.index == seq.slot;
    return load.unit == engine::CacheUnit::kBlock &&
           std::find(seq.block_table.begin(), seq.block_table.end(), load.index) !=
               seq.block_table.end();
  });
}

void Scheduler::PlanSpills() {
  plan_.cache_saves.clear();
  saves_in_flight_.clear();
  for (const kvcache::CacheEviction& eviction : spills_) {
    const bool block = eviction.unit == kvcache::CacheEviction::Unit::kBlock;
    plan_.cache_saves.push_back(engine::CacheSave{
        block ? engine::CacheUnit::kBlock : engine::CacheUnit::kCheckpoint, eviction.index});
    saves_in_flight_.push_back(
        OffloadKey{eviction.hash, block ? OffloadKind::kLatentBlock : OffloadKind::kKdaCheckpoint});
  }
  spills_.clear();
}

const engine::StepPlan* Scheduler::PlanWriteDown(int64_t max_bytes) {
  CHECK(!in_flight_) << "PlanWriteDown during a step";
  if (tiers_ == nullptr || tiers_->disk() == nullptr) return nullptr;  // nothing outlives us
  tiers_->Flush();  // the previous batch on disk before the next is queued (no dropped Puts)
  if (!write_down_listed_) {
    write_down_listed_ = true;
    using Unit = kvcache::CacheEviction::Unit;
    block_pool_.ForEachCached([&](kvcache::BlockId block, kvcache::BlockHash hash) {
      if (tiers_->Contains(OffloadKey{hash, OffloadKind::kLatentBlock}) == OffloadTier::kNone) {
        write_down_.push_back({Unit::kBlock, hash, block});
      }
    });
    prefix_cache_.ForEachCommitted([&](kvcache::CheckpointId id, kvcache::BlockHash hash) {
      if (tiers_->Contains(OffloadKey{hash, OffloadKind::kKdaCheckpoint}) == OffloadTier::kNone) {
        write_down_.push_back({Unit::kCheckpoint, hash, id});
      }
    });
    std::reverse(write_down_.begin(), write_down_.end());  // taken from the back
  }
  if (write_down_.empty()) return nullptr;
  ++step_id_;
  entries_.clear();
  saves_.clear();
  plan_.step_id = step_id_;
  plan_.sequences.clear();
  plan_.cache_loads.clear();
  spills_.clear();
  // A batch fits the disk tier's writer queue (which Flush emptied): its entry count as well as
  // its bytes, or the Puts past the limit would be dropped (a 1M-token prefix is ~16K blocks).
  const kvcache::DiskTier& disk = *tiers_->disk();
  max_bytes = std::min(max_bytes, disk.max_queued_write_bytes());
  const size_t max_units = static_cast<size_t>(disk.max_queued_writes());
  for (int64_t bytes = 0; !write_down_.empty() && spills_.size() < max_units;
       write_down_.pop_back()) {
    const kvcache::CacheEviction& unit = write_down_.back();
    const int64_t unit_bytes = unit.unit == kvcache::CacheEviction::Unit::kBlock
                                   ? offload_block_bytes_
                                   : offload_state_bytes_;
    if (bytes + unit_bytes > max_bytes && !spills_.empty()) break;
    bytes += unit_bytes;
    spills_.push_back(unit);
  }
  PlanSpills();
  in_flight_ = true;
  return &plan_;
}

void Scheduler::StoreSpills(std::vector<std::string>* saved) {
  if (saves_in_flight_.empty()) return;
  CHECK_EQ(saved->size(), saves_in_flight_.size()) << "one saved unit per cache save";
  for (size_t i = 0; i < saves_in_flight_.size(); ++i) {
    const OffloadKey& key = saves_in_flight_[i];
    std::string& bytes = (*saved)[i];
    const int64_t want =
        key.kind == OffloadKind::kLatentBlock ? offload_block_bytes_ : offload_state_bytes_;
    CHECK_EQ(static_cast<int64_t>(bytes.size()), want) << "saved unit of the wrong size";
    const int64_t size = static_cast<int64_t>(bytes.size());
    // A write-down waits for room in the disk writer's queue (other loops may be writing down
    // into the same tiers); a step's spills never wait (they are dropped and counted).
    absl::Status status = write_down_listed_ ? tiers_->StoreWaiting(key, std::move(bytes))
                                             : tiers_->Store(key, std::move(bytes));
    if (!status.ok()) {
      ++counters_.num_tier_store_failures;
      LOG_DEBUG("kvoffload", "not stored: {}", status.ToString());
      continue;
    }
    ++counters_.num_tier_stored_units;
    counters_.num_tier_stored_bytes += size;
  }
  saves_in_flight_.clear();
}

}  // namespace strata::scheduler
