#include "server/scheduler_step_stats.h"

namespace strata::server {

StepStats StepStatsFromScheduler(const scheduler::SchedulerStats& before,
                                 const scheduler::SchedulerStats& after, double step_seconds,
                                 int64_t kda_checkpoint_bytes_each) {
  StepStats s;
  s.num_running = after.num_running;
  s.num_waiting = after.num_waiting;
  s.num_prefill_tokens = after.num_prefill_tokens_total - before.num_prefill_tokens_total;
  s.num_decode_tokens = after.num_decode_tokens_total - before.num_decode_tokens_total;
  s.kv_cache_usage = after.block_usage;
  s.state_slot_usage = after.slot_usage;
  s.num_preemptions = after.num_preempted_total - before.num_preempted_total;
  s.num_spec_drafts = after.num_spec_drafts_total - before.num_spec_drafts_total;
  s.num_spec_draft_tokens = after.num_spec_draft_tokens_total - before.num_spec_draft_tokens_total;
  s.num_spec_accepted_tokens =
      after.num_spec_accepted_tokens_total - before.num_spec_accepted_tokens_total;
  s.num_prefix_query_tokens = after.num_prefix_query_tokens - before.num_prefix_query_tokens;
  s.num_prefix_hit_tokens = after.num_prefix_hit_tokens - before.num_prefix_hit_tokens;
  s.num_kda_checkpoints = after.num_checkpoints;
  s.num_kda_checkpoints_in_slots = after.num_lent_checkpoints;
  s.kda_checkpoint_bytes = int64_t{after.num_checkpoints} * kda_checkpoint_bytes_each;
  s.num_kda_checkpoint_evictions = after.num_checkpoints_evicted - before.num_checkpoints_evicted;
  s.prefill_chunk_limit_tokens = after.prefill_tokens_with_decodes;
  s.num_prefill_tokens_computed = after.num_prefill_tokens_computed;
  s.num_prefill_tokens_remaining = after.num_prefill_tokens_remaining;
  s.step_seconds = step_seconds;
  return s;
}

}  // namespace strata::server
