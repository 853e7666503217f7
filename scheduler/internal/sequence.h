// Sequence: the scheduler's private record of one request, from Add to its end.
//
//   waiting ──admit──► running ──stop / max_tokens──► finished (freed in Commit)
//                      (a tier hit's loads first: loading() until they are all in plans)
//      ▲                  │
//      └────preempt───────┘   (blocks and slot freed; recomputed from token 0 or a prefix hit)
//   waiting / running ──Abort──► aborted (freed at the next Schedule)
//
// `tokens` is the prompt followed by every output token emitted so far. A running sequence
// holds block_table (MLA pages covering [0, num_computed_tokens + tokens of the step in
// flight)) and, with KDA layers, one state slot; a waiting one holds nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/sampling.h"
#include "engine/step.h"
#include "kvcache/block_hash.h"
#include "kvcache/ids.h"
#include "kvcache/offload/offload_key.h"
#include "scheduler/ngram_proposer.h"
#include "scheduler/request.h"

namespace strata::scheduler::internal {

enum class SequenceStatus : uint8_t { kWaiting, kRunning, kFinished };

struct Sequence {
  // `request.prompt` is moved into `tokens`. With `hash_blocks`, block_hashes is kept for
  // every full block of `tokens` (chained, salted with request.cache_salt and the content keys
  // of the images a block holds: kvcache::BlockSalt).
  Sequence(SequenceId id, Request request, int64_t arrival, int block_size, bool hash_blocks);

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  // Whole blocks a prefix-cache lookup may match: never the last token's (its logits must be
  // computed).
  int64_t num_matchable_blocks(int block) const { return (num_tokens() - 1) / block; }
  // Tokens not yet in the caches (>= 1 for a running sequence between steps).
  int64_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }

  // Appends a sampled token and extends block_hashes when a block becomes full.
  void AppendToken(int32_t token);
  // Why the sequence ends after its last appended token, if it does.
  std::optional<FinishReason> StopReason() const;

  const SequenceId id;
  Request request;  // prompt moved out; the rest are the request's parameters
  std::vector<int32_t> tokens;
  const int64_t num_prompt_tokens;
  const int64_t arrival;  // admission order key (monotonic per scheduler)
  const int block_size;
  const bool hash_blocks;
  std::vector<kvcache::BlockHash> block_hashes;   // [num_tokens / block_size] when hash_blocks
  std::vector<kvcache::MediaKeySpan> media_keys;  // request.media's positions and content keys
  std::shared_ptr<engine::Sampler> sampler;       // kept across preemption (RNG, penalties)

  SequenceStatus status = SequenceStatus::kWaiting;
  bool abort_requested = false;

  // Cache state, valid while running.
  int64_t num_computed_tokens = 0;
  std::vector<kvcache::BlockId> block_table;
  kvcache::SlotId slot = -1;
  engine::SlotInit slot_init = engine::SlotInit::kZero;  // how the next scheduled step starts
  kvcache::CheckpointId source_checkpoint = -1;          // with kFromCheckpoint
  int32_t num_registered_blocks = 0;  // block_table[0, n) passed to CacheFullBlock
  // Boundary hashes of its latest stride checkpoints (reserved or committed, oldest first):
  // at most SchedulerConfig::stride_checkpoints_per_sequence; older ones were Demoted.
  std::vector<kvcache::BlockHash> stride_checkpoints;
  // Boundaries (tokens, ascending) where another request's prompt parts from this one's: a
  // checkpoint saved there lets the requests sharing the prefix hit. Kept like prompt ends.
  std::vector<int64_t> branch_points;
  // Boundary hash of its latest checkpoint past the prompt (reserved or committed): it sits at
  // the cold end of the LRU while the sequence runs, is dropped when a later one supersedes
  // it, and goes to the hot end when the sequence finishes (its conversation may go on).
  std::optional<kvcache::BlockHash> generation_checkpoint;
  // A prefix hit that goes on in the offload tiers (scheduler_offload.cc), while the sequence
  // waits: the disk reads asked for and not taken yet, and the bytes read so far.
  std::vector<kvcache::OffloadKey> tier_reads;
  absl::flat_hash_map<kvcache::OffloadKey, std::string> tier_bytes;
  bool skip_tiers = false;  // a read failed: this admission computes past the device hit
  // An admitted tier hit's loads not in a plan yet, last first (Scheduler::IssueLoads): while
  // any is left the sequence is running but not scheduled to compute.
  std::vector<engine::CacheLoad> pending_loads;
  bool loading() const { return !pending_loads.empty(); }
  std::vector<int32_t> draft;  // speculative tokens of the step in flight (capacity reused)
  std::unique_ptr<NgramIndex> ngram_index;  // built at the first draft, then kept up to date
  // Adaptive drafting: a draft is at most one token longer than the last one's accepted run
  // (draft_cap, 0: num_speculative_tokens), and after a draft with nothing accepted the next
  // draft_skip eligible steps draft nothing (the pause doubles per such draft, up to
  // kMaxDraftPause): where lookup guesses wrong, drafts cost ever less.
  int32_t draft_cap = 0;
  int32_t draft_skip = 0;
  int32_t draft_pause = 0;

  // Index of this sequence's entry in the step being built / in flight, or -1.
  int32_t step_index = -1;

  // Prompt scoring (request.prompt_logprobs >= 0): prompt tokens [1, num_prompt_scored] have
  // been scored; their scores wait in prompt_scores for the first output token's event.
  bool scores_prompt() const {
    return request.prompt_logprobs >= 0 && num_prompt_scored < num_prompt_tokens - 1;
  }
  std::vector<engine::TokenScore> prompt_scores;
  int64_t num_prompt_scored = 0;

  int64_t num_cached_tokens = 0;  // prefix-hit tokens at first admission
  bool admitted_once = false;
  int32_t num_preemptions = 0;
};

}  // namespace strata::scheduler::internal
