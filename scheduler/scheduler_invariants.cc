// Scheduler::CheckInvariants(): the consistency checks of the model-based random test.
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kvcache/ids.h"
#include "scheduler/scheduler.h"

namespace strata::scheduler {
namespace {

absl::Status Broken(const auto&... parts) { return absl::InternalError(absl::StrCat(parts...)); }

}  // namespace

using internal::SequenceStatus;

absl::Status Scheduler::CheckInvariants() const {
  RETURN_IF_ERROR(block_pool_.CheckInvariants());
  RETURN_IF_ERROR(slot_pool_.CheckInvariants());
  RETURN_IF_ERROR(prefix_cache_.CheckInvariants());

  InvariantTally tally;
  tally.refs.assign(static_cast<size_t>(block_pool_.num_blocks()), 0);
  tally.slot_owned.assign(static_cast<size_t>(slot_pool_.num_slots()), 0);
  for (const auto& [id, owned] : sequences_) {
    if (owned->id != id) return Broken("sequence map key ", id, " holds sequence ", owned->id);
    RETURN_IF_ERROR(CheckSequence(*owned, &tally));
  }
  RETURN_IF_ERROR(CheckQueues(tally));
  // Every shared disk read is waited for by exactly the sequences listing it.
  absl::flat_hash_map<kvcache::OffloadKey, int32_t> waiters;
  for (const auto& [id, seq] : sequences_) {
    for (const kvcache::OffloadKey& key : seq->tier_reads) ++waiters[key];
  }
  if (waiters.size() != tier_reads_.size()) {
    return Broken(tier_reads_.size(), " disk reads in flight, ", waiters.size(), " waited for");
  }
  for (const auto& [key, read] : tier_reads_) {
    auto it = waiters.find(key);
    if (it == waiters.end() || it->second != read.waiters) {
      return Broken("disk read ", key.hash, " counts ", read.waiters, " waiters");
    }
  }
  return CheckCacheCounts(tally);
}

absl::Status Scheduler::CheckSequence(const Sequence& seq, InvariantTally* tally) const {
  const SequenceId id = seq.id;
  auto rid = by_request_id_.find(seq.request.request_id);
  if (rid == by_request_id_.end() || rid->second != id) {
    return Broken("sequence ", id, " missing from the request-id map");
  }
  if (seq.status == SequenceStatus::kWaiting) {
    ++tally->num_waiting;
    auto it = waiting_.find(KeyOf(seq));
    if (it == waiting_.end() || it->second != &seq) {
      return Broken("waiting sequence ", id, " is not queued");
    }
    if (!seq.block_table.empty() || seq.slot >= 0 || seq.num_computed_tokens != 0 ||
        seq.step_index >= 0) {
      return Broken("waiting sequence ", id, " holds cache state");
    }
    if ((!seq.tier_reads.empty() || !seq.tier_bytes.empty()) && tiers_ == nullptr) {
      return Broken("waiting sequence ", id, " reads from offload tiers there are not");
    }
    return absl::OkStatus();
  }
  if (!seq.tier_reads.empty() || !seq.tier_bytes.empty()) {
    return Broken("running sequence ", id, " still holds offload tier reads");
  }
  if (seq.status != SequenceStatus::kRunning) {
    return Broken("finished sequence ", id, " is still live");
  }
  ++tally->num_running;
  int64_t in_flight = 0, drafts = 0;
  if (seq.step_index >= 0) {
    const size_t index = static_cast<size_t>(seq.step_index);
    if (index >= entries_.size() || entries_[index].seq != &seq) {
      return Broken("sequence ", id, " has a stale step index");
    }
    in_flight = entries_[index].num_new_tokens;
    drafts = entries_[index].num_drafts;
  }
  const int64_t covered = seq.num_computed_tokens + in_flight;
  if (covered > seq.num_tokens()) {
    return Broken("sequence ", id, " computes ", covered, " of ", seq.num_tokens(), " tokens");
  }
  if (drafts > 0 &&
      (covered != seq.num_tokens() || static_cast<int64_t>(seq.draft.size()) < drafts)) {
    return Broken("sequence ", id, " verifies ", drafts, " drafts without sampling");
  }
  if (static_cast<int64_t>(seq.block_table.size()) !=
      kvcache::NumBlocksFor(covered + drafts, config_.block_size)) {
    return Broken("sequence ", id, " holds ", seq.block_table.size(), " blocks for ", covered,
                  " tokens");
  }
  for (kvcache::BlockId b : seq.block_table) {
    if (b < 0 || b >= block_pool_.num_blocks()) return Broken("sequence ", id, " block ", b);
    ++tally->refs[static_cast<size_t>(b)];
  }
  if (!config_.has_kda_layers) {
    if (seq.slot != -1) return Broken("sequence ", id, " has a slot without KDA layers");
    return absl::OkStatus();
  }
  if (seq.slot < 0 || seq.slot >= slot_pool_.num_slots() || !slot_pool_.is_allocated(seq.slot)) {
    return Broken("running sequence ", id, " has no held slot (", seq.slot, ")");
  }
  if (tally->slot_owned[static_cast<size_t>(seq.slot)]++) {
    return Broken("slot ", seq.slot, " is shared by two live sequences");
  }
  return absl::OkStatus();
}

absl::Status Scheduler::CheckQueues(const InvariantTally& tally) const {
  if (tally.num_running != static_cast<int32_t>(running_.size())) {
    return Broken(tally.num_running, " running sequences but the running list has ",
                  running_.size());
  }
  for (const Sequence* seq : running_) {
    auto it = sequences_.find(seq->id);
    if (it == sequences_.end() || it->second.get() != seq ||
        seq->status != SequenceStatus::kRunning) {
      return Broken("running list holds a sequence that is not running: ", seq->id);
    }
  }
  if (tally.num_waiting != static_cast<int32_t>(waiting_.size())) {
    return Broken(tally.num_waiting, " waiting sequences but the queue has ", waiting_.size());
  }
  if (tally.num_running > config_.max_num_seqs) {
    return Broken(tally.num_running, " running sequences > max_num_seqs ", config_.max_num_seqs);
  }
  if (by_request_id_.size() != sequences_.size()) return Broken("request-id map size differs");
  return absl::OkStatus();
}

absl::Status Scheduler::CheckCacheCounts(const InvariantTally& tally) const {
  int32_t num_referenced = 0;
  for (kvcache::BlockId b = 0; b < block_pool_.num_blocks(); ++b) {
    const int32_t expected = tally.refs[static_cast<size_t>(b)];
    if (block_pool_.ref_count(b) != expected) {
      return Broken("block ", b, " ref_count ", block_pool_.ref_count(b), " but ", expected,
                    " block tables hold it");
    }
    num_referenced += expected > 0 ? 1 : 0;
  }
  if (num_referenced + block_pool_.num_free() != block_pool_.num_blocks()) {
    return Broken("free ", block_pool_.num_free(), " + held ", num_referenced, " != total ",
                  block_pool_.num_blocks());
  }
  if (config_.has_kda_layers &&
      slot_pool_.num_held() != tally.num_running + prefix_cache_.num_lent_slots()) {
    return Broken(slot_pool_.num_held(), " slots held by ", tally.num_running,
                  " running sequences and ", prefix_cache_.num_lent_slots(), " checkpoints");
  }
  int32_t num_reserved = 0;
  for (const Entry& entry : entries_) num_reserved += entry.num_saves;
  if (prefix_cache_.num_pending_checkpoints() != num_reserved) {
    return Broken(prefix_cache_.num_pending_checkpoints(), " pending checkpoints but the step ",
                  "reserved ", num_reserved);
  }
  return absl::OkStatus();
}

}  // namespace strata::scheduler
