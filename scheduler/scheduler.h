// Scheduler: continuous batching for one data-parallel rank (docs/architecture.md, "Data flow").
//
// The engine loop drives it, one step at a time:
//   plan   = scheduler.Schedule();          // which sequences run which tokens, cache places
//   result = executor.Execute(plan);        // one forward over the ragged batch
//   events = scheduler.Commit(result);      // append tokens, stop checks, cache commits, frees
// Add() and Abort() may come at any time between those calls (same thread).
//
// A step (Schedule) under the token budget (max_num_batched_tokens) and the sequence cap
// (max_num_seqs):
//   0. frees the requests aborted since the last step;
//   1. running sequences with one token left (decodes), in admission order;
//   2. running sequences with more left (partial prefills, recomputes), in admission order;
//      While a request waits, these leave it a share of the budget (AdmissionReserve), so a long
//      prompt's chunks do not hold later requests until it is prefilled;
//   3. waiting requests in policy order (FCFS, or priority then arrival), each with a prefix
//      cache lookup, while a slot, the blocks of its first chunk and budget are available.
//      A request sharing whole blocks with a running sequence that has not computed them yet
//      steps aside until they are cached (the next request may be admitted before it).
// Requests scoring their prompt (prompt_logprobs) skip the lookup, and their chunks also fit
// the step's max_scored_tokens_per_step (each scored position costs a logits row).
//   4. with speculative decoding, drafts (ngram_proposer.h) for sequences sampling past their
//      prompt, from the budget and blocks left: the executor verifies them in the same forward
//      and advances the caches by the accepted ones only (the KDA state by a replay of their
//      saved rows, engine/kda_drafts.h); the rows of rejected drafts are overwritten later.
// A chunk is cut by the budget, by long_prefill_token_threshold and, in a step with decodes, by
// SetPrefillTokensWithDecodes; the executor saves a KDA checkpoint at every checkpoint boundary
// inside it (PrefixCache::CheckpointBoundaries) that gets a checkpoint slot, as the chunk's
// tokens pass it. When a running sequence needs a block and none is free, the lowest-priority
// newest running sequence (possibly itself, possibly one already placed in this step) is
// preempted: its blocks and slot are freed and it waits to be recomputed from its prompt and
// emitted tokens; those tokens are never emitted again.
//
// One mutator, not thread-safe: the engine loop thread owns the scheduler and its pools.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/step.h"
#include "kvcache/block_pool.h"
#include "kvcache/offload/offload_tiers.h"
#include "kvcache/prefix_cache.h"
#include "kvcache/state_slot_pool.h"
#include "scheduler/internal/sequence.h"
#include "scheduler/request.h"
#include "scheduler/scheduler_config.h"
#include "scheduler/scheduler_stats.h"

namespace strata::scheduler {

// The checks Add() makes on a request alone (empty prompt, negative ids, max_tokens < 1,
// prompt + max_tokens over max_model_len), so a front end can reject it synchronously.
absl::Status ValidateRequest(const Request& request, const SchedulerConfig& config);

class Scheduler {
 public:
  // `config` must be valid (CHECK); Create() returns its Validate() error instead.
  explicit Scheduler(const SchedulerConfig& config);
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerConfig& config);
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. InvalidArgument for an empty prompt, a negative token id, max_tokens < 1
  // or prompt + max_tokens > max_model_len (the message names the numbers); AlreadyExists for
  // a request_id that is live. Returns the sequence id the plans and events use.
  absl::StatusOr<SequenceId> Add(Request request);

  // Ends a live request: it is freed at the next Schedule() and reported (finished = kAbort)
  // by the Commit() after that. Tokens sampled for it in the step in flight are dropped.
  // Unknown or already finished ids are ignored.
  void Abort(const std::string& request_id);

  // Builds the next step. Must alternate with Commit(). An empty plan is valid (nothing to run,
  // or only aborts to process). The plan lives in the scheduler and stays valid until the next
  // Schedule(); its storage is reused from step to step, so a steady decode step allocates
  // nothing (copying the plan out does allocate).
  const engine::StepPlan& Schedule();

  // Applies the result of the plan from the last Schedule(): one SampledToken per
  // ScheduledSequence with sample == true, in plan order (CHECK). Returns the events of this
  // step: aborts processed by the last Schedule() first, then one event per sampled token.
  std::vector<SequenceEvent> Commit(const engine::StepResult& result);
  // The same, moving the result's saved units into the offload tiers instead of copying them.
  std::vector<SequenceEvent> Commit(engine::StepResult* result);

  // Lower tiers for the prefix cache (docs/kv-offload.md; null: none). What the prefix cache
  // evicts — cached blocks, committed checkpoints — goes into the plan's cache_saves and, with
  // the result's bytes, into `tiers` at Commit. An admission whose prefix goes on past the
  // device cache in the tiers loads the rest with the plan's cache_loads (blocks into new
  // pages, the checkpoint straight into its slot); a part only on disk is read ahead and the
  // request steps aside until it is in memory, so no step waits for disk. A failed read (a
  // corrupt or truncated file) makes that admission compute past the device hit instead.
  // `block_bytes` and `state_row_bytes` are the executor's unit sizes (CacheLayout): bytes of
  // another size are refused like a failed read. Between steps only; `tiers` must outlive the
  // scheduler.
  void SetOffloadTiers(kvcache::OffloadTiers* tiers, int64_t block_bytes, int64_t state_row_bytes);
  const kvcache::OffloadTiers* offload_tiers() const { return tiers_; }

  // Graceful shutdown with tiers: writes down what the device cache holds, so a restart finds
  // prefixes that were never evicted too. Each call returns a plan of saves (no sequences) of at
  // most max_bytes (and at most what the disk tier's writer queue takes: entries and bytes) of
  // the cached blocks and committed checkpoints the tiers do not hold yet (the list is taken at
  // the first call), after waiting for the disk tier's queued writes;
  // Execute it and Commit(&result) as a step. Null when everything is written down.
  const engine::StepPlan* PlanWriteDown(int64_t max_bytes);

  // Forgets every cached prefix no sequence holds (vLLM's reset_prefix_cache, e.g. between
  // benchmark runs): free cached blocks are uncached, and the KDA checkpoints at their
  // boundaries go with them; blocks running sequences hold keep their hashes. Between steps
  // only (CHECK: not while a step is in flight).
  struct PrefixCacheReset {
    int32_t blocks = 0;       // cached blocks forgotten
    int32_t checkpoints = 0;  // KDA checkpoints dropped with them
  };
  PrefixCacheReset ResetPrefixCache();

  // While a step carries decodes, its prefill chunks (prompts, recomputes) take at most
  // `tokens` tokens together, so the sequences generating are not held up for a long prompt's
  // whole chunk; 0 (the initial value): no limit but the budget. The engine loop sets it
  // between steps from a PrefillPacer (prefill_pacer.h).
  void SetPrefillTokensWithDecodes(int64_t tokens);
  // Whether Schedule() has anything to do (waiting, running or aborted requests).
  bool HasWork() const;
  SchedulerStats stats() const;

  // The random test's checks (O(num_blocks + sequences)): pool invariants; each block's ref
  // count equals the number of live block tables holding it (so free + held == total and no
  // block is both free and referenced); each running sequence holds its own slot and the
  // blocks for its computed (+ in-flight) tokens; waiting sequences hold nothing; pending
  // checkpoints are exactly those of the step in flight.
  absl::Status CheckInvariants() const;

  const SchedulerConfig& config() const { return config_; }
  const kvcache::BlockPool& block_pool() const { return block_pool_; }
  const kvcache::StateSlotPool& slot_pool() const { return slot_pool_; }
  const kvcache::PrefixCache& prefix_cache() const { return prefix_cache_; }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  bool step_in_flight() const { return in_flight_; }

 private:
  using Sequence = internal::Sequence;
  // Waiting-queue key: (priority under kPriority else 0, arrival); smallest is admitted first,
  // the running sequence with the largest key is preempted first.
  using QueueKey = std::pair<int, int64_t>;

  // One sequence's share of the step being built.
  struct Entry {
    Sequence* seq = nullptr;  // nullptr: preempted after being placed (dropped from the plan)
    int64_t num_new_tokens = 0;
    bool sample = false;
    bool decode = false;
    int64_t num_scored = 0;  // prompt positions scored (score targets) in this step
    // Its KDA checkpoint saves: saves_[first_save, first_save + num_saves), ascending.
    int32_t first_save = 0;
    int32_t num_saves = 0;
    bool saves_generation = false;  // one save is seq->generation_checkpoint
    int32_t num_drafts = 0;         // seq->draft, after the new tokens
  };

  QueueKey KeyOf(const Sequence& seq) const;
  bool checkpoints_enabled() const;
  absl::Span<const engine::CheckpointSave> Saves(const Entry& entry) const {
    return absl::MakeConstSpan(saves_).subspan(static_cast<size_t>(entry.first_save),
                                               static_cast<size_t>(entry.num_saves));
  }

  // Schedule() phases (scheduler_step.cc).
  void ProcessAborts();
  void ScheduleRunning(bool decodes);
  // Places the next chunk of a running sequence, preempting others (or itself) for blocks.
  void ScheduleOne(Sequence* seq);
  // Tokens of this step's budget the running prefills leave to admissions: while a request
  // waits that could be admitted (a slot and a sequence free) and a running prompt is still
  // prefilling, the head's uncomputed tokens, at most a quarter of the budget left; else 0.
  int64_t AdmissionReserve() const;
  void AdmitWaiting();
  // Phase 5: drafts for the placed sequences that sample past their prompt.
  void AttachDrafts();
  // Whether a running sequence is still computing a prefix `seq` shares (whole blocks): `seq`
  // then waits for it to be cached rather than computing it a second time (n > 1 choices,
  // requests with the same long system prompt arriving together). With KDA layers that
  // sequence gets a branch point where the shared blocks end, so `seq` can hit there.
  bool WaitsForSharedPrefix(const Sequence& seq);
  bool TryAdmit(Sequence* seq);

  // Offload tiers (scheduler_offload.cc).
  // A prefix hit past the device cache: block i < num_blocks is device[i] when cached on the
  // device, else read from a tier (seq->tier_bytes); the checkpoint at its end likewise.
  struct TierHit {
    int32_t num_blocks = 0;
    std::vector<kvcache::BlockId> device;   // [num_blocks], −1: loaded
    kvcache::CheckpointId checkpoint = -1;  // on the device; −1: loaded (or no KDA layers)
  };
  enum class TierLookup : uint8_t { kNone, kWait, kHit };
  // Whether `seq`'s prefix (hashes) goes on past `match` with the tiers' help: the hit's shape
  // (which units are on the device), nothing read yet.
  bool FindTierHit(Sequence* seq, absl::Span<const kvcache::BlockHash> hashes,
                   const kvcache::PrefixMatch& match, TierHit* hit);
  // Gathers the bytes of the hit's units that are not on the device into seq->tier_bytes: host
  // ones at once, disk ones read ahead. kHit: all there; kWait: disk reads pending; kNone: a
  // read failed (the sequence then skips the tiers).
  TierLookup ReadTierHit(Sequence* seq, absl::Span<const kvcache::BlockHash> hashes,
                         const TierHit& hit);
  // A read failed or returned bytes of the wrong size: forgets the sequence's reads.
  TierLookup FailTierHit(Sequence* seq);
  // Cancels the sequence's pending reads and drops its bytes.
  void ForgetTierReads(Sequence* seq);
  // The sequence stops waiting for `key` (its last waiter cancels the read).
  void ReleaseTierRead(const kvcache::OffloadKey& key);
  // Queues the load of `key`'s bytes (moved out of seq->tier_bytes) into the unit, in
  // seq->pending_loads.
  void LoadFromTier(Sequence* seq, const kvcache::OffloadKey& key, engine::CacheUnit unit,
                    int32_t index);
  // Moves `seq`'s pending loads into the plan while this step's load budget lasts (at least one
  // load a step); `all` ignores the budget. True when none is left: the sequence may compute in
  // this step (the executor copies every load before the forward). Loads of a sequence that
  // stays loading are marked beside_step.
  bool IssueLoads(Sequence* seq, bool all = false);
  // Takes this step's loads into `seq`'s units out of the plan (it is preempted: its units may
  // go to a sequence that computes in this step, which a load beside the step would race).
  void DropPlannedLoads(const Sequence& seq);
  // Moves spills_ into the plan's cache_saves (and their keys into saves_in_flight_).
  void PlanSpills();
  // Moves the saved units of the step in flight into the tiers.
  void StoreSpills(std::vector<std::string>* saved);
  // Tokens of `seq` from `begin` this step may run (0: none this step).
  int64_t ChunkSize(const Sequence& seq, int64_t begin) const;
  // The largest chunk any step could give `seq` (the static caps on a chunk).
  int64_t MaxChunk(const Sequence& seq) const;
  void Place(Sequence* seq, int64_t num_new_tokens);
  // Phase 4: the KDA checkpoints each placed chunk saves — its prompt-end, branch-point,
  // past-the-prompt and latest stride boundaries — reserved once every preemption and admission is
  // done (a wait for a shared prefix adds a branch point to a sequence placed before it).
  void PlaceCheckpoints();
  void PlaceCheckpoints(Entry* entry);
  // Makes `boundary` one of `seq`'s branch points (sorted, unique).
  void AddBranchPoint(Sequence* seq, int64_t boundary);
  // Records a new stride checkpoint of `seq`, Demoting the ones beyond its latest
  // stride_checkpoints_per_sequence.
  void KeepStrideCheckpoint(Sequence* seq, kvcache::BlockHash hash);
  Sequence* PickVictim() const;
  void Preempt(Sequence* seq);
  void BuildPlan();

  // CheckInvariants() helpers (scheduler_invariants.cc).
  struct InvariantTally {
    std::vector<int32_t> refs;        // [num_blocks] block-table references
    std::vector<uint8_t> slot_owned;  // [num_slots]
    int32_t num_running = 0;
    int32_t num_waiting = 0;
  };
  absl::Status CheckSequence(const Sequence& seq, InvariantTally* tally) const;
  absl::Status CheckQueues(const InvariantTally& tally) const;
  absl::Status CheckCacheCounts(const InvariantTally& tally) const;

  // Commit() helpers (scheduler.cc).
  // `sampled`: the entry's tokens (one, or 1 + accepted drafts), empty when it samples none.
  void CommitEntry(const Entry& entry, absl::Span<const engine::SampledToken> sampled,
                   const engine::ScoredSequence* scored, std::vector<SequenceEvent>* events);
  // Speculative bookkeeping of an entry with drafts (counters, adaptive drafting). Returns the
  // number of drafts accepted.
  int64_t CommitDrafts(const Entry& entry, absl::Span<const engine::SampledToken> sampled);
  void CommitScores(const Entry& entry, const engine::ScoredSequence& scored);
  void RegisterFullBlocks(Sequence* seq);
  void ReleaseCaches(Sequence* seq);
  void Retire(Sequence* seq);
  SequenceEvent MakeEvent(const Sequence& seq) const;

  const SchedulerConfig config_;
  kvcache::BlockPool block_pool_;
  kvcache::StateSlotPool slot_pool_;
  kvcache::PrefixCache prefix_cache_;  // after block_pool_: it installs the eviction callback
  kvcache::OffloadTiers* tiers_ = nullptr;
  int64_t offload_block_bytes_ = 0;
  int64_t offload_state_bytes_ = 0;
  // Disk reads in flight, shared by the waiting sequences that need the same key (the disk
  // tier keeps one request and one result per key): how many wait, and the result once taken.
  struct TierRead {
    int32_t waiters = 0;
    std::optional<absl::StatusOr<std::string>> result;
  };
  absl::flat_hash_map<kvcache::OffloadKey, TierRead> tier_reads_;
  std::vector<kvcache::CacheEviction> spills_;        // evicted since the last plan
  std::vector<kvcache::OffloadKey> saves_in_flight_;  // keys of the plan's cache_saves
  bool waits_on_tier_ = false;                        // TryAdmit's answer: reads pending
  int64_t load_budget_ = 0;                         // bytes of tier loads this step may still carry
  std::vector<kvcache::CacheEviction> write_down_;  // PlanWriteDown's units left
  bool write_down_listed_ = false;

  absl::flat_hash_map<SequenceId, std::unique_ptr<Sequence>> sequences_;  // live ones
  absl::flat_hash_map<std::string, SequenceId> by_request_id_;
  std::map<QueueKey, Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order
  std::vector<SequenceId> pending_aborts_;
  std::vector<SequenceEvent> abort_events_;  // returned by the next Commit()

  // The step being built (inside Schedule) or in flight (until Commit).
  std::vector<Entry> entries_;
  std::vector<engine::CheckpointSave> saves_;  // of entries_, reserved in the prefix cache
  std::vector<int64_t> boundaries_;            // scratch of PlaceCheckpoints
  engine::StepPlan plan_;  // built by Schedule(), read by the executor until the next one
  int64_t token_budget_ = 0;
  int64_t score_budget_ = 0;  // prompt positions this step may still score
  int64_t prefill_tokens_with_decodes_ = 0;
  int64_t prefill_budget_ = 0;  // prefill tokens this step may still place
  bool in_flight_ = false;
  std::vector<Sequence*> scratch_;  // reused by ScheduleRunning and Commit (no per-step malloc)

  SequenceId next_seq_id_ = 0;
  int64_t next_arrival_ = 0;
  int64_t step_id_ = 0;
  SchedulerStats counters_;  // the "last step" and "_total" fields
};

}  // namespace strata::scheduler
