#include "server/scheduler_step_stats.h"

#include <gtest/gtest.h>

namespace strata::server {
namespace {

TEST(SchedulerStepStatsTest, CountsAreDifferencesOfTotalsAndGaugesAreTheLatest) {
  scheduler::SchedulerStats before;
  before.num_prefill_tokens_total = 1000;
  before.num_decode_tokens_total = 50;
  before.num_preempted_total = 2;
  before.num_prefix_query_tokens = 640;
  before.num_prefix_hit_tokens = 128;
  before.num_running = 9;
  before.block_usage = 0.9;
  before.num_checkpoints_evicted = 11;
  before.prefill_tokens_with_decodes = 256;
  scheduler::SchedulerStats after = before;
  after.num_running = 3;
  after.num_waiting = 5;
  after.num_prefill_tokens_total = 1512;
  after.num_decode_tokens_total = 53;
  after.num_preempted_total = 3;
  after.num_spec_drafts_total = 4;
  after.num_spec_draft_tokens_total = 16;
  after.num_spec_accepted_tokens_total = 7;
  after.num_prefix_query_tokens = 704;
  after.num_prefix_hit_tokens = 192;
  after.block_usage = 0.5;
  after.slot_usage = 0.25;
  after.num_checkpoints = 6;
  after.num_lent_checkpoints = 4;
  after.num_checkpoints_evicted = 14;
  after.prefill_tokens_with_decodes = 176;
  after.num_prefill_tokens_computed = 2048;
  after.num_prefill_tokens_remaining = 260096;

  const StepStats s = StepStatsFromScheduler(before, after, 0.125, 1 << 20);
  EXPECT_EQ(s.num_running, 3);
  EXPECT_EQ(s.num_waiting, 5);
  EXPECT_EQ(s.num_prefill_tokens, 512);
  EXPECT_EQ(s.num_decode_tokens, 3);
  EXPECT_EQ(s.num_preemptions, 1);
  EXPECT_EQ(s.num_spec_drafts, 4);
  EXPECT_EQ(s.num_spec_draft_tokens, 16);
  EXPECT_EQ(s.num_spec_accepted_tokens, 7);
  EXPECT_EQ(s.num_prefix_query_tokens, 64);
  EXPECT_EQ(s.num_prefix_hit_tokens, 64);
  EXPECT_EQ(s.kv_cache_usage, 0.5);
  EXPECT_EQ(s.state_slot_usage, 0.25);
  EXPECT_EQ(s.num_kda_checkpoints, 6);
  EXPECT_EQ(s.num_kda_checkpoints_in_slots, 4);
  EXPECT_EQ(s.kda_checkpoint_bytes, 6 << 20);
  EXPECT_EQ(s.num_kda_checkpoint_evictions, 3);
  EXPECT_EQ(s.prefill_chunk_limit_tokens, 176);
  EXPECT_EQ(s.num_prefill_tokens_computed, 2048);  // now, not differences
  EXPECT_EQ(s.num_prefill_tokens_remaining, 260096);
  EXPECT_EQ(s.step_seconds, 0.125);
  EXPECT_TRUE(s.expert_tokens.empty());
  EXPECT_FALSE(s.all_to_all_seconds.has_value());
}

}  // namespace
}  // namespace strata::server
