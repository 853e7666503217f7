// Scheduler::Schedule() and its phases: aborts, running decodes, running prefills, admissions,
// preemption, KDA checkpoint saves, drafts, and the plan.
#include <algorithm>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kvcache/ids.h"
#include "scheduler/ngram_proposer.h"
#include "scheduler/scheduler.h"

namespace strata::scheduler {

using internal::SequenceStatus;

namespace {
// Inserts `value` into the ascending `values` unless it is there.
void InsertSortedUnique(std::vector<int64_t>* values, int64_t value) {
  auto at = std::lower_bound(values->begin(), values->end(), value);
  if (at == values->end() || *at != value) values->insert(at, value);
}
}  // namespace

const engine::StepPlan& Scheduler::Schedule() {
  CHECK(!in_flight_) << "Schedule() called again before Commit()";
  ++step_id_;
  counters_.step_id = step_id_;
  counters_.num_scheduled_seqs = 0;
  counters_.num_prefill_tokens = 0;
  counters_.num_decode_tokens = 0;
  counters_.num_preempted = 0;

  ProcessAborts();
  prefix_cache_.BeginStep();
  plan_.cache_loads.clear();  // admissions with a tier hit queue theirs
  load_budget_ = config_.max_tier_load_bytes_per_step;
  // Admitted tier hits still loading go on first (admission order); one whose last loads are
  // in this plan computes in this step.
  for (Sequence* seq : running_) {
    if (seq->loading()) IssueLoads(seq);
  }
  entries_.clear();
  saves_.clear();
  token_budget_ = config_.max_num_batched_tokens;
  score_budget_ = config_.max_scored_tokens_per_step;
  prefill_budget_ = std::numeric_limits<int64_t>::max();
  ScheduleRunning(/*decodes=*/true);
  if (prefill_tokens_with_decodes_ > 0 &&
      std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.decode; })) {
    // What the decode pass placed of prompts (a last prompt token) counts against the cap.
    prefill_budget_ -= std::numeric_limits<int64_t>::max() - prefill_tokens_with_decodes_;
  }
  // Running prefills leave the head of the queue its share (AdmissionReserve), so one long
  // prompt taking every step's budget does not hold every later request until it is done.
  const int64_t reserve = AdmissionReserve();
  token_budget_ -= reserve;
  prefill_budget_ -= reserve;
  ScheduleRunning(/*decodes=*/false);
  token_budget_ += reserve;
  prefill_budget_ += reserve;
  AdmitWaiting();
  PlaceCheckpoints();
  AttachDrafts();
  BuildPlan();
  in_flight_ = true;
  return plan_;
}

void Scheduler::ProcessAborts() {
  for (SequenceId id : pending_aborts_) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) continue;
    Sequence* seq = it->second.get();
    if (seq->status == SequenceStatus::kWaiting) {
      waiting_.erase(KeyOf(*seq));
    } else {
      ReleaseCaches(seq);
      running_.erase(std::find(running_.begin(), running_.end(), seq));
    }
    SequenceEvent event = MakeEvent(*seq);
    event.finished = FinishReason::kAbort;
    abort_events_.push_back(std::move(event));
    ++counters_.num_aborted_total;
    Retire(seq);
  }
  pending_aborts_.clear();
}

void Scheduler::ScheduleRunning(bool decodes) {
  // Preemption edits running_, so walk a copy; preempted sequences are skipped by status.
  scratch_.assign(running_.begin(), running_.end());
  for (Sequence* seq : scratch_) {
    if (token_budget_ <= 0) return;
    if (seq->status != SequenceStatus::kRunning || seq->step_index >= 0 || seq->loading()) {
      continue;
    }
    CHECK_GE(seq->num_uncomputed_tokens(), 1) << "running sequence " << seq->id << " has no work";
    if ((seq->num_uncomputed_tokens() == 1) != decodes) continue;
    ScheduleOne(seq);
  }
}

void Scheduler::ScheduleOne(Sequence* seq) {
  const int64_t begin = seq->num_computed_tokens;
  const int64_t n = ChunkSize(*seq, begin);
  if (n == 0) return;
  const int32_t need = kvcache::NumBlocksFor(begin + n, config_.block_size) -
                       static_cast<int32_t>(seq->block_table.size());
  while (need > block_pool_.num_free()) {
    Sequence* victim = PickVictim();
    Preempt(victim);
    if (victim == seq) return;
  }
  if (need > 0) {
    std::optional<std::vector<kvcache::BlockId>> blocks = block_pool_.Allocate(need);
    CHECK(blocks.has_value());
    seq->block_table.insert(seq->block_table.end(), blocks->begin(), blocks->end());
  }
  Place(seq, n);
}

int64_t Scheduler::AdmissionReserve() const {
  if (waiting_.empty() || static_cast<int32_t>(running_.size()) >= config_.max_num_seqs) return 0;
  if (config_.has_kda_layers && slot_pool_.num_free() + prefix_cache_.num_lent_slots() == 0) {
    return 0;  // no slot: the head cannot be admitted this step
  }
  const bool long_prefill_running = std::any_of(running_.begin(), running_.end(), [](Sequence* s) {
    return s->step_index < 0 && s->num_uncomputed_tokens() > 1;
  });
  if (!long_prefill_running) return 0;
  // At most a quarter of what is left: a short request's whole prompt, a long one's first
  // chunks (it then runs beside the first long prompt, each at its share).
  const Sequence& head = *waiting_.begin()->second;
  return std::min({head.num_uncomputed_tokens(), token_budget_ / 4, prefill_budget_ / 4});
}

void Scheduler::AdmitWaiting() {
  auto it = waiting_.begin();
  while (it != waiting_.end() && token_budget_ > 0 && prefill_budget_ > 0 &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = it->second;
    ++it;  // TryAdmit erases seq's entry
    if (WaitsForSharedPrefix(*seq)) {
      ++counters_.num_prefix_waits;
      continue;  // steps aside until the prefix is cached; the next request may go first
    }
    if (!TryAdmit(seq)) {
      if (waits_on_tier_) continue;  // reading its prefix from disk: the next may go first
      return;                        // head-of-line: keep the order
    }
  }
}

bool Scheduler::WaitsForSharedPrefix(const Sequence& seq) {
  if (!config_.enable_prefix_caching || seq.scores_prompt()) return false;
  const size_t query = static_cast<size_t>(seq.num_matchable_blocks(config_.block_size));
  for (Sequence* r : running_) {
    // Hashes are chained: equal at block j means the prefixes through j are equal, so the shared
    // blocks are a prefix of both lists, found by a binary search (O(log n) per pair).
    size_t lo = 0, hi = std::min(query, r->block_hashes.size());  // shared ∈ [lo, hi]
    while (lo < hi) {
      const size_t mid = lo + (hi - lo + 1) / 2;
      if (r->block_hashes[mid - 1] == seq.block_hashes[mid - 1]) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const int64_t shared = static_cast<int64_t>(lo) * config_.block_size;
    // A sequence still loading a tier hit has not registered its blocks yet either.
    if (lo > 0 && (r->num_computed_tokens < shared || r->loading())) {
      // On a KDA model the wait pays only if `r` saves its state where the prefixes part.
      if (checkpoints_enabled()) AddBranchPoint(r, shared);
      return true;
    }
  }
  return false;
}

bool Scheduler::TryAdmit(Sequence* seq) {
  waits_on_tier_ = false;
  if (config_.has_kda_layers && slot_pool_.num_free() + prefix_cache_.num_lent_slots() == 0) {
    return false;
  }
  kvcache::PrefixMatch match;
  int64_t num_query_blocks = 0;
  const bool lookup = config_.enable_prefix_caching && !seq->scores_prompt();
  if (lookup) {
    num_query_blocks = seq->num_matchable_blocks(config_.block_size);
    if (num_query_blocks == static_cast<int64_t>(seq->block_hashes.size())) {
      match = prefix_cache_.Lookup(seq->block_hashes);
    } else {
      match = prefix_cache_.Lookup(std::vector<kvcache::BlockHash>(
          seq->block_hashes.begin(), seq->block_hashes.begin() + num_query_blocks));
    }
  }
  // The hit: the device's, or one that goes on in the offload tiers.
  TierHit hit;
  const auto hashes = absl::MakeConstSpan(seq->block_hashes).first(num_query_blocks);
  const bool from_tiers = lookup && tiers_ != nullptr && FindTierHit(seq, hashes, match, &hit);
  if (!from_tiers) {
    hit.num_blocks = static_cast<int32_t>(match.blocks.size());
    hit.device = match.blocks;
    hit.checkpoint = match.checkpoint;
  }
  const int64_t begin = static_cast<int64_t>(hit.num_blocks) * config_.block_size;
  const int64_t n = ChunkSize(*seq, begin);
  if (n == 0) return false;
  std::vector<kvcache::BlockId> held;  // the hit's blocks cached on the device
  held.reserve(hit.device.size());
  for (kvcache::BlockId b : hit.device) {
    if (b >= 0) held.push_back(b);
  }
  const int32_t need =
      kvcache::NumBlocksFor(begin + n, config_.block_size) - static_cast<int32_t>(held.size());
  // Taking the hit takes its free (cached) blocks off the free queue.
  if (need > block_pool_.num_free() - block_pool_.CountFree(held)) return false;
  // Only now that it fits, the tiers' bytes (no copy held for a request that cannot start).
  if (from_tiers) {
    const TierLookup read = ReadTierHit(seq, hashes, hit);
    if (read != TierLookup::kHit) {
      // Reads pending, or one failed (then the next step admits with the device hit).
      waits_on_tier_ = true;
      if (read == TierLookup::kWait) ++counters_.num_tier_waits;
      return false;
    }
  }
  // No free slot: take back one lent to the prefix cache (not the one this hit copies).
  if (config_.has_kda_layers && slot_pool_.num_free() == 0 &&
      !prefix_cache_.ReturnLentSlot(hit.checkpoint)) {
    return false;
  }

  // Take the hit before Allocate, which may evict its free blocks.
  if (!from_tiers) {
    if (!match.blocks.empty()) prefix_cache_.Acquire(match);
  } else {
    block_pool_.Touch(held);
    if (hit.checkpoint >= 0) {
      kvcache::PrefixMatch checkpoint_only;
      checkpoint_only.checkpoint = hit.checkpoint;
      prefix_cache_.Acquire(checkpoint_only);
    }
  }
  std::optional<std::vector<kvcache::BlockId>> blocks = block_pool_.Allocate(need);
  CHECK(blocks.has_value());
  seq->block_table.clear();
  size_t next = 0;  // of *blocks
  for (int32_t i = 0; i < hit.num_blocks; ++i) {
    kvcache::BlockId b = hit.device[static_cast<size_t>(i)];
    if (b < 0) {
      b = (*blocks)[next++];
      const kvcache::OffloadKey key{seq->block_hashes[static_cast<size_t>(i)],
                                    kvcache::OffloadKind::kLatentBlock};
      LoadFromTier(seq, key, engine::CacheUnit::kBlock, b);
      ++counters_.num_tier_loaded_blocks;
    }
    seq->block_table.push_back(b);
  }
  seq->block_table.insert(seq->block_table.end(), blocks->begin() + static_cast<ptrdiff_t>(next),
                          blocks->end());
  seq->num_computed_tokens = begin;
  // Blocks past the device match (cached or loaded) are registered at Commit (CacheFullBlock of
  // a block cached under its hash is a no-op): a load is in place only once its step has run.
  seq->num_registered_blocks = static_cast<int32_t>(match.blocks.size());
  seq->slot_init =
      hit.checkpoint >= 0 ? engine::SlotInit::kFromCheckpoint : engine::SlotInit::kZero;
  seq->source_checkpoint = hit.checkpoint;
  if (config_.has_kda_layers) {
    std::optional<kvcache::SlotId> slot = slot_pool_.Allocate();
    CHECK(slot.has_value());
    seq->slot = *slot;
    if (from_tiers && hit.checkpoint < 0) {
      const kvcache::OffloadKey key{seq->block_hashes[static_cast<size_t>(hit.num_blocks - 1)],
                                    kvcache::OffloadKind::kKdaCheckpoint};
      LoadFromTier(seq, key, engine::CacheUnit::kSlot, seq->slot);
      ++counters_.num_tier_loaded_checkpoints;
      seq->slot_init = engine::SlotInit::kCarry;  // the load is the slot's state at `begin`
    }
  }
  seq->skip_tiers = false;  // a failed read spoils this admission only
  if (from_tiers) {
    ForgetTierReads(seq);
    ++counters_.num_tier_hits;
    counters_.num_tier_hit_tokens += begin;
  }

  if (lookup) {
    ++counters_.num_prefix_queries;
    counters_.num_prefix_query_tokens += num_query_blocks * config_.block_size;
    if (hit.num_blocks > 0) {
      ++counters_.num_prefix_hits;
      counters_.num_prefix_hit_tokens += begin;
    }
  }
  if (!seq->admitted_once) {
    seq->admitted_once = true;
    seq->num_cached_tokens = begin;
    // An earlier request computed more of this prompt than any checkpoint covers: save one
    // where its cached blocks end, so that the next request sharing the prefix hits there.
    // (Not on readmission: there the cached chain is this sequence's own.)
    if (checkpoints_enabled() && match.num_chain_tokens > begin) {
      AddBranchPoint(seq, match.num_chain_tokens);
    }
  }
  waiting_.erase(KeyOf(*seq));
  seq->status = SequenceStatus::kRunning;
  running_.push_back(seq);
  // A tier hit's loads, in unit order; past this step's load budget the rest go in later steps
  // and the sequence computes once they are all in (not when a device checkpoint must be copied
  // in this step).
  std::reverse(seq->pending_loads.begin(), seq->pending_loads.end());
  if (!IssueLoads(seq, /*all=*/from_tiers && hit.checkpoint >= 0)) {
    // It computes in a later step: give back the first chunk's blocks until then.
    const auto hit_end = seq->block_table.begin() + hit.num_blocks;
    block_pool_.Free(std::vector<kvcache::BlockId>(hit_end, seq->block_table.end()));
    seq->block_table.erase(hit_end, seq->block_table.end());
    ++counters_.num_tier_staged_hits;
    return true;
  }
  Place(seq, n);
  return true;
}

int64_t Scheduler::ChunkSize(const Sequence& seq, int64_t begin) const {
  int64_t n = std::min({seq.num_tokens() - begin, token_budget_, prefill_budget_});
  if (config_.long_prefill_token_threshold > 0) {
    n = std::min(n, config_.long_prefill_token_threshold);
  }
  if (n <= 0) return 0;
  if (seq.scores_prompt()) {
    // Positions [begin, num_prompt − 1) are scored (each predicts the next prompt token).
    const int64_t scored = std::clamp<int64_t>(seq.num_prompt_tokens - 1 - begin, 0, n);
    if (scored > score_budget_) n = score_budget_;
    if (n <= 0) return 0;
  }
  const int64_t align = config_.prefill_chunk_alignment;
  if (align > 1 && begin + n < seq.num_tokens()) {
    const int64_t aligned_end = (begin + n) / align * align;
    if (aligned_end > begin) {
      n = aligned_end - begin;
    } else if (MaxChunk(seq) >= align - begin % align) {
      return 0;  // the grid is out of this step's reach, not of a later one's: wait for it
    }            // else no step can reach it (caps below the alignment): cut where the budget says
  }
  return n;
}

int64_t Scheduler::MaxChunk(const Sequence& seq) const {
  int64_t n = config_.max_num_batched_tokens;
  if (config_.long_prefill_token_threshold > 0) {
    n = std::min(n, config_.long_prefill_token_threshold);
  }
  if (seq.scores_prompt()) n = std::min(n, config_.max_scored_tokens_per_step);
  return n;
}

void Scheduler::Place(Sequence* seq, int64_t num_new_tokens) {
  const int64_t begin = seq->num_computed_tokens;
  const int64_t end = begin + num_new_tokens;
  Entry entry;
  entry.seq = seq;
  entry.num_new_tokens = num_new_tokens;
  entry.sample = end == seq->num_tokens();
  // Past the prompt: one token (more only where a preempted sequence is recomputed).
  entry.decode = entry.sample && begin >= seq->num_prompt_tokens;
  if (seq->scores_prompt()) {
    entry.num_scored = std::clamp<int64_t>(seq->num_prompt_tokens - 1 - begin, 0, num_new_tokens);
    score_budget_ -= entry.num_scored;
  }
  seq->step_index = static_cast<int32_t>(entries_.size());
  entries_.push_back(entry);
  token_budget_ -= num_new_tokens;
  if (!entry.decode) prefill_budget_ -= num_new_tokens;
}

void Scheduler::PlaceCheckpoints() {
  if (!checkpoints_enabled()) return;
  for (Entry& entry : entries_) {
    if (entry.seq != nullptr) PlaceCheckpoints(&entry);
  }
}

void Scheduler::PlaceCheckpoints(Entry* entry) {
  Sequence* seq = entry->seq;
  const int64_t begin = seq->num_computed_tokens;
  const int64_t end = begin + entry->num_new_tokens;
  prefix_cache_.CheckpointBoundaries(begin, end, seq->num_prompt_tokens, &boundaries_);
  for (int64_t point : seq->branch_points) {
    if (point > begin && point <= end) InsertSortedUnique(&boundaries_, point);
  }
  // Past the prompt, the chunk's last block boundary: the next turn of a conversation (this
  // prompt, this output, then more) can start there.
  const int64_t generated = end / config_.block_size * config_.block_size;
  const bool past_prompt = generated > begin && generated > seq->num_prompt_tokens;
  if (past_prompt) InsertSortedUnique(&boundaries_, generated);
  // Stride boundaries: only the last few. Prompt ends, branch points, and the generated one:
  // always.
  const auto is_stride = [&](int64_t boundary) {
    return prefix_cache_.IsStrideBoundary(boundary) && !(past_prompt && boundary == generated) &&
           !prefix_cache_.IsPromptEnd(boundary, seq->num_prompt_tokens) &&
           !std::binary_search(seq->branch_points.begin(), seq->branch_points.end(), boundary);
  };
  const int64_t keep = config_.stride_checkpoints_per_sequence;
  int64_t strides_left = std::count_if(boundaries_.begin(), boundaries_.end(), is_stride);
  entry->first_save = static_cast<int32_t>(saves_.size());
  for (int64_t boundary : boundaries_) {
    const kvcache::BlockHash hash =
        seq->block_hashes[static_cast<size_t>(boundary / config_.block_size - 1)];
    const bool stride = is_stride(boundary);
    if (stride && keep > 0 && strides_left-- > keep) continue;
    // Demote first, so that an eviction the reservation needs takes this sequence's own old
    // stride checkpoint rather than another conversation's.
    if (stride && keep > 0) KeepStrideCheckpoint(seq, hash);
    const bool generation = past_prompt && boundary == generated;
    if (generation && seq->generation_checkpoint != hash) {
      // Its previous one is superseded: the reservation reuses that slot, evicting nothing.
      if (seq->generation_checkpoint.has_value()) prefix_cache_.Drop(*seq->generation_checkpoint);
      seq->generation_checkpoint = hash;
    }
    // A running sequence's state past its prompt takes only capacity nobody else uses.
    std::optional<kvcache::CheckpointId> id =
        prefix_cache_.ReserveCheckpoint(hash, /*evict_warm=*/!generation);
    if (!id.has_value()) continue;
    saves_.push_back({*id, boundary - begin});
    entry->saves_generation |= generation;
  }
  entry->num_saves = static_cast<int32_t>(saves_.size()) - entry->first_save;
}

void Scheduler::AddBranchPoint(Sequence* seq, int64_t boundary) {
  InsertSortedUnique(&seq->branch_points, boundary);
}

void Scheduler::KeepStrideCheckpoint(Sequence* seq, kvcache::BlockHash hash) {
  std::vector<kvcache::BlockHash>& hot = seq->stride_checkpoints;
  if (std::find(hot.begin(), hot.end(), hash) != hot.end()) return;  // a recompute passing it
  hot.push_back(hash);
  const auto keep = static_cast<size_t>(config_.stride_checkpoints_per_sequence);
  if (hot.size() <= keep) return;
  for (size_t i = 0; i + keep < hot.size(); ++i) prefix_cache_.Demote(hot[i]);
  hot.erase(hot.begin(), hot.end() - static_cast<std::ptrdiff_t>(keep));
}

void Scheduler::AttachDrafts() {
  const int k_max = config_.num_speculative_tokens;
  if (k_max == 0) return;
  if (config_.speculative_disable_by_batch_size > 0 &&
      num_running() >= config_.speculative_disable_by_batch_size) {
    return;
  }
  for (Entry& entry : entries_) {
    Sequence* seq = entry.seq;
    if (token_budget_ <= 0) return;
    // Only past the prompt, and not where the step saves a KDA checkpoint (a save is the
    // state after new tokens that are all kept).
    if (seq == nullptr || !entry.sample || entry.num_scored > 0 || entry.num_saves > 0 ||
        seq->num_computed_tokens < seq->num_prompt_tokens) {
      continue;
    }
    // Every draft accepted plus the token after them stay within max_tokens (hence within
    // max_model_len).
    int64_t k = std::min<int64_t>(
        {k_max, token_budget_, seq->request.max_tokens - seq->num_output_tokens() - 1});
    const int64_t end = seq->num_computed_tokens + entry.num_new_tokens;
    const int64_t room = (static_cast<int64_t>(seq->block_table.size()) + block_pool_.num_free()) *
                             config_.block_size -
                         end;
    k = std::min(k, room);
    if (checkpoints_enabled()) {
      // Drafts never carry a sequence past a block boundary: the step that ends there saves
      // the state for the conversation's next turn (and steps with saves draft nothing).
      k = std::min(k, (end / config_.block_size + 1) * config_.block_size - 1 - end);
    }
    if (seq->draft_cap > 0) k = std::min<int64_t>(k, seq->draft_cap);
    if (k <= 0) continue;
    if (seq->draft_skip > 0) {
      --seq->draft_skip;
      continue;
    }
    if (seq->ngram_index == nullptr) {
      seq->ngram_index =
          std::make_unique<NgramIndex>(config_.prompt_lookup_min, config_.prompt_lookup_max);
    }
    const int n = seq->ngram_index->Propose(seq->tokens, static_cast<int>(k), &seq->draft);
    if (n == 0) continue;
    const int32_t need = kvcache::NumBlocksFor(end + n, config_.block_size) -
                         static_cast<int32_t>(seq->block_table.size());
    if (need > 0) {
      std::optional<std::vector<kvcache::BlockId>> blocks = block_pool_.Allocate(need);
      CHECK(blocks.has_value());
      seq->block_table.insert(seq->block_table.end(), blocks->begin(), blocks->end());
    }
    entry.num_drafts = n;
    token_budget_ -= n;
  }
}

Scheduler::Sequence* Scheduler::PickVictim() const {
  CHECK(!running_.empty());
  Sequence* victim = running_.front();
  for (Sequence* seq : running_) {
    if (KeyOf(*seq) > KeyOf(*victim)) victim = seq;
  }
  return victim;
}

void Scheduler::Preempt(Sequence* seq) {
  if (seq->step_index >= 0) {  // already placed in this step: take it out again
    Entry& entry = entries_[static_cast<size_t>(seq->step_index)];
    token_budget_ += entry.num_new_tokens;
    if (!entry.decode) prefill_budget_ += entry.num_new_tokens;
    score_budget_ += entry.num_scored;
    CHECK_EQ(entry.num_saves, 0) << "checkpoints are placed after every preemption";
    entry.seq = nullptr;
    seq->step_index = -1;
  }
  DropPlannedLoads(*seq);
  ReleaseCaches(seq);
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  seq->status = SequenceStatus::kWaiting;
  waiting_.emplace(KeyOf(*seq), seq);
  ++seq->num_preemptions;
  ++counters_.num_preempted;
  ++counters_.num_preempted_total;
}

void Scheduler::BuildPlan() {
  size_t kept = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].seq == nullptr) continue;
    entries_[kept] = entries_[i];
    entries_[kept].seq->step_index = static_cast<int32_t>(kept);
    ++kept;
  }
  entries_.resize(kept);

  // Reuses the previous plan's vectors: assign() keeps their capacity.
  engine::StepPlan& plan = plan_;
  plan.step_id = step_id_;
  plan.sequences.resize(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& entry = entries_[i];
    Sequence* seq = entry.seq;
    engine::ScheduledSequence& out = plan.sequences[i];
    const int64_t begin = seq->num_computed_tokens;
    out.seq_id = seq->id;
    out.token_ids.assign(seq->tokens.begin() + begin,
                         seq->tokens.begin() + begin + entry.num_new_tokens);
    out.token_ids.insert(out.token_ids.end(), seq->draft.begin(),
                         seq->draft.begin() + entry.num_drafts);
    out.num_draft_tokens = entry.num_drafts;
    out.num_computed_tokens = begin;
    out.block_table.assign(seq->block_table.begin(), seq->block_table.end());
    out.slot = seq->slot;
    out.slot_init = seq->slot_init;
    out.source_checkpoint = seq->source_checkpoint;
    const absl::Span<const engine::CheckpointSave> saves = Saves(entry);
    out.save_checkpoints.assign(saves.begin(), saves.end());
    out.sample = entry.sample;
    out.sampler = seq->sampler;
    out.num_logprobs = seq->request.num_logprobs;
    // Target i of this step's token i: the prompt token after it.
    out.score_targets.assign(seq->tokens.begin() + begin + 1,
                             seq->tokens.begin() + begin + 1 + entry.num_scored);
    out.num_score_logprobs = std::max(seq->request.prompt_logprobs, 0);
    out.media.clear();
    for (const engine::MediaEmbedding& m : seq->request.media) {
      if (m.position < begin + entry.num_new_tokens && m.end() > begin) out.media.push_back(m);
    }
    seq->slot_init = engine::SlotInit::kCarry;
    seq->source_checkpoint = -1;
    (entry.decode ? counters_.num_decode_tokens : counters_.num_prefill_tokens) +=
        entry.num_new_tokens + entry.num_drafts;
  }
  // Evicted units a tier keeps: copied out before anything in this step writes the cache.
  PlanSpills();
  counters_.num_scheduled_seqs = static_cast<int32_t>(entries_.size());
  counters_.num_prefill_tokens_total += counters_.num_prefill_tokens;
  counters_.num_decode_tokens_total += counters_.num_decode_tokens;
}

}  // namespace strata::scheduler
