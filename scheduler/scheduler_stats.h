// SchedulerStats: a snapshot for metrics and logs (Scheduler::stats()). "Last step" fields
// describe the most recent Schedule(); "_total" fields count since construction.
#pragma once

#include <cstdint>

namespace strata::scheduler {

struct SchedulerStats {
  int64_t step_id = 0;  // of the most recent Schedule()
  int32_t num_running = 0;
  int32_t num_waiting = 0;  // includes preempted sequences waiting to be recomputed

  // Last step.
  int32_t num_scheduled_seqs = 0;
  int64_t num_prefill_tokens = 0;  // prompt (or recompute) tokens scheduled
  int64_t num_decode_tokens = 0;   // one per sequence that decodes
  int32_t num_preempted = 0;       // preemptions while building the step
  // The cap on the prompt tokens of a step with decodes (SetPrefillTokensWithDecodes) in force
  // since the last step was built; 0: none but the budget.
  int64_t prefill_tokens_with_decodes = 0;

  // Prefill progress, now: over the running sequences whose prompt is not all computed yet
  // (long prompts being prefilled chunk by chunk), the prompt tokens in the caches (prefix
  // cache hits included) and those still to compute.
  int64_t num_prefill_tokens_computed = 0;
  int64_t num_prefill_tokens_remaining = 0;

  // Totals.
  int64_t num_preempted_total = 0;
  int64_t num_prefill_tokens_total = 0;
  int64_t num_decode_tokens_total = 0;
  int64_t num_finished_total = 0;  // stop or length
  int64_t num_aborted_total = 0;
  // Speculative decoding (vLLM's spec_decode counters): steps in which a sequence verified
  // drafts, the draft tokens proposed, and those accepted (each saves a step).
  int64_t num_spec_drafts_total = 0;
  int64_t num_spec_draft_tokens_total = 0;
  int64_t num_spec_accepted_tokens_total = 0;

  // Caches, now.
  int32_t num_blocks = 0;
  int32_t num_free_blocks = 0;    // includes cached free blocks (reusable)
  int32_t num_cached_blocks = 0;  // registered in the prefix cache, held or free
  double block_usage = 0.0;       // held / total
  int32_t num_slots = 0;
  int32_t num_free_slots = 0;
  double slot_usage = 0.0;
  int32_t num_checkpoints = 0;          // committed KDA checkpoints
  int32_t num_lent_checkpoints = 0;     // of those, in live slots no sequence holds (lent)
  int32_t num_pending_checkpoints = 0;  // reserved by the step in flight
  int64_t num_checkpoints_evicted = 0;  // total: committed ones evicted to make room (LRU)

  // Prefix cache, totals: one query per admission (recompute admissions included).
  int64_t num_prefix_queries = 0;
  int64_t num_prefix_query_tokens = 0;  // tokens of the full blocks looked up
  int64_t num_prefix_hits = 0;          // admissions that reused >= 1 block
  int64_t num_prefix_hit_tokens = 0;
  // Admissions put off because a running sequence was still computing a shared prefix.
  int64_t num_prefix_waits = 0;

  // Offload tiers (docs/kv-offload.md), totals. Admissions whose hit went on in a lower tier,
  // and the prompt tokens those hits covered (device and tiers together; also counted in
  // num_prefix_hit_tokens); units read back and written down; admissions put off for disk reads;
  // hits dropped because a read failed (the sequence recomputes instead); units the tiers
  // refused to store.
  int64_t num_tier_hits = 0;
  int64_t num_tier_hit_tokens = 0;
  int64_t num_tier_loaded_blocks = 0;
  int64_t num_tier_loaded_checkpoints = 0;
  int64_t num_tier_loaded_bytes = 0;
  int64_t num_tier_stored_units = 0;
  int64_t num_tier_stored_bytes = 0;
  int64_t num_tier_store_failures = 0;
  int64_t num_tier_waits = 0;
  int64_t num_tier_load_failures = 0;
  // Tier hits whose loads went over several steps (past max_tier_load_bytes_per_step).
  int64_t num_tier_staged_hits = 0;
};

}  // namespace strata::scheduler
