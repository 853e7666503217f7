// Scheduler: construction, Add / Abort, Commit and the bookkeeping they share.
#include "scheduler/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace strata::scheduler {

using internal::SequenceStatus;

namespace {

const SchedulerConfig& CheckValid(const SchedulerConfig& config) {
  absl::Status status = config.Validate();
  CHECK(status.ok()) << status.ToString();
  return config;
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(CheckValid(config)),
      block_pool_(config.num_blocks),
      slot_pool_(config.has_kda_layers ? config.num_slots : 0),
      prefix_cache_(&block_pool_, config.num_checkpoint_slots, config.checkpoint_every_n_blocks,
                    config.block_size, /*needs_checkpoints=*/config.has_kda_layers,
                    /*lender=*/&slot_pool_) {}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerConfig& config) {
  absl::Status status = config.Validate();
  if (!status.ok()) return status;
  return std::make_unique<Scheduler>(config);
}

Scheduler::~Scheduler() = default;

Scheduler::QueueKey Scheduler::KeyOf(const Sequence& seq) const {
  int priority = config_.policy == Policy::kPriority ? seq.request.priority : 0;
  return {priority, seq.arrival};
}

bool Scheduler::checkpoints_enabled() const {
  return config_.enable_prefix_caching && config_.has_kda_layers &&
         config_.num_checkpoint_slots > 0;
}

absl::Status ValidateRequest(const Request& request, const SchedulerConfig& config) {
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len == 0) return absl::InvalidArgumentError("prompt is empty");
  for (int32_t token : request.prompt) {
    if (token < 0) {
      return absl::InvalidArgumentError(absl::StrCat("prompt has a negative token id ", token));
    }
  }
  if (request.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be >= 1, got ", request.max_tokens));
  }
  if (request.prompt_logprobs < -1 || request.prompt_logprobs > kMaxPromptLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("prompt_logprobs must be in [-1, ",
                                                   kMaxPromptLogprobs, "], got ",
                                                   request.prompt_logprobs));
  }
  if (prompt_len + request.max_tokens > config.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt_len, " tokens) + max_tokens (", request.max_tokens, ") = ",
        prompt_len + request.max_tokens, " exceeds max_model_len (", config.max_model_len, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SequenceId> Scheduler::Add(Request request) {
  if (absl::Status valid = ValidateRequest(request, config_); !valid.ok()) return valid;
  if (by_request_id_.contains(request.request_id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("request_id '", request.request_id, "' is already running"));
  }
  const SequenceId id = next_seq_id_++;
  auto sampler =
      std::make_shared<engine::Sampler>(request.sampling, request.fallback_seed, request.prompt);
  auto seq = std::make_unique<Sequence>(id, std::move(request), next_arrival_++, config_.block_size,
                                        config_.enable_prefix_caching);
  seq->sampler = std::move(sampler);
  waiting_.emplace(KeyOf(*seq), seq.get());
  by_request_id_.emplace(seq->request.request_id, id);
  sequences_.emplace(id, std::move(seq));
  return id;
}

void Scheduler::Abort(const std::string& request_id) {
  auto it = by_request_id_.find(request_id);
  if (it == by_request_id_.end()) return;
  Sequence* seq = sequences_.at(it->second).get();
  if (seq->abort_requested) return;
  seq->abort_requested = true;
  pending_aborts_.push_back(seq->id);
}

std::vector<SequenceEvent> Scheduler::Commit(engine::StepResult* result) {
  CHECK(in_flight_) << "Commit() without Schedule()";
  StoreSpills(&result->saved);
  return Commit(*result);
}

std::vector<SequenceEvent> Scheduler::Commit(const engine::StepResult& result) {
  CHECK(in_flight_) << "Commit() without Schedule()";
  CHECK_EQ(result.step_id, step_id_) << "result of another step";
  if (!saves_in_flight_.empty()) {
    std::vector<std::string> saved = result.saved;
    StoreSpills(&saved);
  }
  plan_.cache_loads.clear();  // in place now: free the bytes
  std::vector<SequenceEvent> events = std::move(abort_events_);
  abort_events_.clear();
  events.reserve(events.size() + entries_.size());
  size_t next = 0, next_scored = 0;
  for (const Entry& entry : entries_) {
    absl::Span<const engine::SampledToken> sampled;
    if (entry.sample) {
      CHECK_LT(next, result.sampled.size()) << "missing sampled token for seq " << entry.seq->id;
      CHECK_EQ(result.sampled[next].seq_id, entry.seq->id) << "sampled tokens out of plan order";
      size_t count = 1;  // 1 + accepted drafts
      while (next + count < result.sampled.size() &&
             result.sampled[next + count].seq_id == entry.seq->id) {
        ++count;
      }
      CHECK_LE(count, static_cast<size_t>(1 + entry.num_drafts))
          << "more sampled tokens than drafts + 1 for seq " << entry.seq->id;
      sampled = absl::MakeConstSpan(&result.sampled[next], count);
      next += count;
    }
    const engine::ScoredSequence* scored = nullptr;
    if (entry.num_scored > 0) {
      CHECK_LT(next_scored, result.scored.size()) << "missing scores for seq " << entry.seq->id;
      scored = &result.scored[next_scored++];
      CHECK_EQ(scored->seq_id, entry.seq->id) << "scores out of plan order";
      CHECK_EQ(static_cast<int64_t>(scored->scores.size()), entry.num_scored);
    }
    CommitEntry(entry, sampled, scored, &events);
  }
  CHECK_EQ(next, result.sampled.size()) << "more sampled tokens than sampling sequences";
  CHECK_EQ(next_scored, result.scored.size()) << "more scores than scoring sequences";
  entries_.clear();
  in_flight_ = false;

  scratch_.clear();
  for (Sequence* seq : running_) {
    if (seq->status == SequenceStatus::kFinished) scratch_.push_back(seq);
  }
  if (!scratch_.empty()) {
    std::erase_if(running_,
                  [](const Sequence* s) { return s->status == SequenceStatus::kFinished; });
    for (Sequence* seq : scratch_) Retire(seq);
  }
  return events;
}

void Scheduler::CommitScores(const Entry& entry, const engine::ScoredSequence& scored) {
  Sequence* seq = entry.seq;
  // Target i is prompt token begin + 1 + i. A recomputed sequence (preempted while scoring)
  // scores positions again: keep the first scores only.
  const int64_t first = seq->num_computed_tokens + 1;
  for (size_t i = 0; i < scored.scores.size(); ++i) {
    const int64_t position = first + static_cast<int64_t>(i);
    if (position <= seq->num_prompt_scored) continue;
    CHECK_EQ(position, seq->num_prompt_scored + 1) << "prompt scores of " << seq->id;
    seq->prompt_scores.push_back(scored.scores[i]);
    seq->num_prompt_scored = position;
  }
}

int64_t Scheduler::CommitDrafts(const Entry& entry,
                                absl::Span<const engine::SampledToken> sampled) {
  Sequence* seq = entry.seq;
  const int64_t accepted = std::max<int64_t>(static_cast<int64_t>(sampled.size()) - 1, 0);
  for (int64_t i = 0; i < accepted; ++i) {
    CHECK_EQ(sampled[static_cast<size_t>(i)].token_id, seq->draft[static_cast<size_t>(i)])
        << "seq " << seq->id << ": a token sampled after a rejected draft";
  }
  ++counters_.num_spec_drafts_total;
  counters_.num_spec_draft_tokens_total += entry.num_drafts;
  counters_.num_spec_accepted_tokens_total += accepted;
  seq->draft_cap = static_cast<int32_t>(accepted + 1);
  seq->draft_pause = accepted > 0 ? 0 : std::clamp(2 * seq->draft_pause, 1, kMaxDraftPause);
  seq->draft_skip = seq->draft_pause;
  return accepted;
}

void Scheduler::CommitEntry(const Entry& entry, absl::Span<const engine::SampledToken> sampled,
                            const engine::ScoredSequence* scored,
                            std::vector<SequenceEvent>* events) {
  Sequence* seq = entry.seq;
  seq->step_index = -1;
  if (scored != nullptr && !seq->abort_requested) CommitScores(entry, *scored);
  // The executor advanced the caches by the step's tokens and the accepted drafts only.
  const int64_t accepted = entry.num_drafts > 0 ? CommitDrafts(entry, sampled) : 0;
  seq->num_computed_tokens += entry.num_new_tokens + accepted;

  // The tokens first (they extend block_hashes), up to the first that ends the sequence; then
  // the cache commits; then one event per token.
  size_t emitted = 0;
  std::optional<FinishReason> reason;
  if (!seq->abort_requested) {
    while (emitted < sampled.size() && !reason.has_value()) {
      seq->AppendToken(sampled[emitted++].token_id);
      reason = seq->StopReason();
    }
  }
  // A draft that ended the sequence (or an abort) leaves computed drafts past its last token;
  // rejected drafts leave blocks past the computed tokens: they go back.
  seq->num_computed_tokens = std::min(seq->num_computed_tokens, seq->num_tokens());
  if (entry.num_drafts > 0) {
    const size_t keep =
        static_cast<size_t>(kvcache::NumBlocksFor(seq->num_computed_tokens, config_.block_size));
    if (seq->block_table.size() > keep) {
      block_pool_.Free(absl::MakeConstSpan(seq->block_table).subspan(keep));
      seq->block_table.resize(keep);
    }
  }
  if (config_.enable_prefix_caching) RegisterFullBlocks(seq);  // before CommitCheckpoint
  for (const engine::CheckpointSave& save : Saves(entry)) {
    prefix_cache_.CommitCheckpoint(save.checkpoint);
  }
  // Until the sequence finishes, its state past the prompt is worth only free capacity.
  if (entry.saves_generation) prefix_cache_.Demote(*seq->generation_checkpoint);

  for (size_t i = 0; i < emitted; ++i) {
    const engine::SampledToken& token = sampled[i];
    SequenceEvent event = MakeEvent(*seq);
    event.num_output_tokens -= static_cast<int64_t>(emitted - 1 - i);
    event.token = token.token_id;
    if (seq->request.num_logprobs >= 0) {
      event.logprob = token.logprob;
      event.top_logprobs = token.top_logprobs;
    }
    if (!seq->prompt_scores.empty()) {  // only with the first token of a scoring request
      event.prompt_scores = std::move(seq->prompt_scores);
      seq->prompt_scores.clear();
    }
    events->push_back(std::move(event));
  }
  if (reason.has_value()) {
    events->back().finished = reason;
    if (seq->generation_checkpoint.has_value()) {
      prefix_cache_.Promote(*seq->generation_checkpoint);
    }
    ReleaseCaches(seq);
    seq->status = SequenceStatus::kFinished;
    ++counters_.num_finished_total;
  }
}

void Scheduler::RegisterFullBlocks(Sequence* seq) {
  const int32_t num_full = static_cast<int32_t>(seq->num_computed_tokens / config_.block_size);
  for (int32_t b = seq->num_registered_blocks; b < num_full; ++b) {
    block_pool_.CacheFullBlock(seq->block_table[static_cast<size_t>(b)],
                               seq->block_hashes[static_cast<size_t>(b)]);
  }
  seq->num_registered_blocks = std::max(seq->num_registered_blocks, num_full);
}

void Scheduler::ReleaseCaches(Sequence* seq) {
  seq->pending_loads.clear();  // a preempted or aborted hit reads its tiers again if readmitted
  if (!seq->block_table.empty()) block_pool_.Free(seq->block_table);
  if (seq->slot >= 0) slot_pool_.Free(seq->slot);
  seq->block_table.clear();
  seq->slot = -1;
  seq->num_computed_tokens = 0;
  seq->num_registered_blocks = 0;
  seq->slot_init = engine::SlotInit::kZero;
  seq->source_checkpoint = -1;
}

void Scheduler::Retire(Sequence* seq) {
  if (tiers_ != nullptr) ForgetTierReads(seq);
  by_request_id_.erase(seq->request.request_id);
  sequences_.erase(seq->id);  // destroys *seq
}

SequenceEvent Scheduler::MakeEvent(const Sequence& seq) const {
  SequenceEvent event;
  event.request_id = seq.request.request_id;
  event.seq_id = seq.id;
  event.num_prompt_tokens = seq.num_prompt_tokens;
  event.num_cached_tokens = seq.num_cached_tokens;
  event.num_output_tokens = seq.num_output_tokens();
  return event;
}

Scheduler::PrefixCacheReset Scheduler::ResetPrefixCache() {
  CHECK(!in_flight_) << "ResetPrefixCache during a step";
  const int32_t checkpoints_before = prefix_cache_.num_checkpoints();
  PrefixCacheReset reset;
  prefix_cache_.SuspendSpills(true);  // forgotten, not kept below
  reset.blocks = block_pool_.DropCachedFreeBlocks();
  prefix_cache_.SuspendSpills(false);
  reset.checkpoints = checkpoints_before - prefix_cache_.num_checkpoints();
  return reset;
}

bool Scheduler::HasWork() const {
  return !waiting_.empty() || !running_.empty() || !pending_aborts_.empty() ||
         !abort_events_.empty();
}

void Scheduler::SetPrefillTokensWithDecodes(int64_t tokens) {
  CHECK_GE(tokens, 0);
  prefill_tokens_with_decodes_ = tokens;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = counters_;
  s.num_running = num_running();
  s.num_waiting = num_waiting();
  s.prefill_tokens_with_decodes = prefill_tokens_with_decodes_;
  for (const Sequence* seq : running_) {
    if (seq->num_computed_tokens >= seq->num_prompt_tokens) continue;
    s.num_prefill_tokens_computed += seq->num_computed_tokens;
    s.num_prefill_tokens_remaining += seq->num_prompt_tokens - seq->num_computed_tokens;
  }
  s.num_blocks = block_pool_.num_blocks();
  s.num_free_blocks = block_pool_.num_free();
  s.num_cached_blocks = block_pool_.num_cached();
  s.block_usage = block_pool_.usage();
  s.num_slots = slot_pool_.num_slots();
  // Live slots lent to the prefix cache are free for sequences (an admission takes them back).
  s.num_free_slots = slot_pool_.num_free() + prefix_cache_.num_lent_slots();
  s.slot_usage = s.num_slots == 0 ? 0.0
                                  : static_cast<double>(s.num_slots - s.num_free_slots) /
                                        static_cast<double>(s.num_slots);
  s.num_checkpoints = prefix_cache_.num_checkpoints();
  s.num_pending_checkpoints = prefix_cache_.num_pending_checkpoints();
  s.num_lent_checkpoints = prefix_cache_.num_lent_slots();
  s.num_checkpoints_evicted = prefix_cache_.stats().num_checkpoints_evicted;
  return s;
}

}  // namespace strata::scheduler
