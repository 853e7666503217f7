// Exact tests of the scheduler on tiny caches (block_size 4): chunk sizes, block tables, slot
// starts, order, budgets, preemption, aborts, stop conditions and Add's validation. Expected
// block ids follow the BlockPool's documented queue order (fresh pool: 0, 1, 2, ...; freed
// uncached blocks go to the front, last block first).
#include "scheduler/scheduler.h"

#include <numeric>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/ngram_proposer.h"
#include "scheduler/testing/driver.h"
#include "scheduler/testing/fake_executor.h"
#include "scheduler/testing/requests.h"

namespace strata::scheduler {
namespace {

using engine::SlotInit;
using engine::StepPlan;
using testing::Driver;
using ::testing::ElementsAre;
using testing::ExpectHealthy;
using testing::FakeExecutor;
using ::testing::HasSubstr;
using testing::MakeRequest;
using testing::Prompt;

constexpr int32_t kVocab = 1000;

SchedulerConfig TinyConfig() {
  SchedulerConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 16;
  c.max_model_len = 32;
  c.block_size = 4;
  c.num_blocks = 16;
  c.num_slots = 4;
  c.num_checkpoint_slots = 4;
  c.checkpoint_every_n_blocks = 2;
  c.enable_prefix_caching = false;
  return c;
}

std::vector<int32_t> Expected(const Request& r) { return FakeExecutor::ExpectedOutput(r, kVocab); }

std::vector<int64_t> ChunkSizes(const StepPlan& plan) {
  std::vector<int64_t> sizes;
  for (const auto& s : plan.sequences) sizes.push_back(static_cast<int64_t>(s.token_ids.size()));
  return sizes;
}

std::vector<SequenceId> SeqIds(const StepPlan& plan) {
  std::vector<SequenceId> ids;
  for (const auto& s : plan.sequences) ids.push_back(s.seq_id);
  return ids;
}

TEST(SchedulerTest, ChunkedPrefillSplitsPromptAcrossSteps) {
  SchedulerConfig c = TinyConfig();
  c.max_num_batched_tokens = 8;
  Driver d(c, kVocab);
  Request r = MakeRequest("a", Prompt(19, 100), 2);
  ASSERT_TRUE(d.scheduler().Add(r).ok());

  StepPlan p1 = d.Step();
  ASSERT_EQ(p1.sequences.size(), 1u);
  EXPECT_EQ(p1.sequences[0].token_ids, Prompt(8, 100));
  EXPECT_EQ(p1.sequences[0].num_computed_tokens, 0);
  EXPECT_THAT(p1.sequences[0].block_table, ElementsAre(0, 1));
  EXPECT_EQ(p1.sequences[0].slot, 0);
  EXPECT_EQ(p1.sequences[0].slot_init, SlotInit::kZero);
  EXPECT_FALSE(p1.sequences[0].sample);
  EXPECT_TRUE(d.last_events().empty());

  StepPlan p2 = d.Step();
  EXPECT_EQ(p2.sequences[0].token_ids, Prompt(8, 108));
  EXPECT_EQ(p2.sequences[0].num_computed_tokens, 8);
  EXPECT_THAT(p2.sequences[0].block_table, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(p2.sequences[0].slot_init, SlotInit::kCarry);
  EXPECT_FALSE(p2.sequences[0].sample);

  StepPlan p3 = d.Step();
  EXPECT_EQ(p3.sequences[0].token_ids, Prompt(3, 116));
  EXPECT_THAT(p3.sequences[0].block_table, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_TRUE(p3.sequences[0].sample);
  ASSERT_EQ(d.last_events().size(), 1u);
  EXPECT_EQ(d.last_events()[0].num_output_tokens, 1);
  EXPECT_FALSE(d.last_events()[0].finished.has_value());

  const std::vector<int32_t> want = Expected(r);
  StepPlan p4 = d.Step();  // decode of the first output token
  EXPECT_THAT(p4.sequences[0].token_ids, ElementsAre(want[0]));
  EXPECT_EQ(p4.sequences[0].num_computed_tokens, 19);
  EXPECT_THAT(p4.sequences[0].block_table, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_TRUE(p4.sequences[0].sample);
  EXPECT_EQ(d.finish_reason("a"), FinishReason::kLength);
  EXPECT_EQ(d.output("a"), want);
  EXPECT_FALSE(d.scheduler().HasWork());
  EXPECT_EQ(d.scheduler().block_pool().num_free(), 16);
  EXPECT_EQ(d.scheduler().slot_pool().num_free(), 4);
  ExpectHealthy(d);
}

TEST(SchedulerTest, LongPrefillThresholdCapsChunkPerSequence) {
  SchedulerConfig c = TinyConfig();
  c.long_prefill_token_threshold = 5;
  Driver d(c, kVocab);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Prompt(12, 100), 1)).ok());
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("b", Prompt(3, 200), 1)).ok());
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(5, 3));
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(5));
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(2));
  ExpectHealthy(d);
}

// prefill_chunk_alignment: a chunk that does not finish its prompt ends at a multiple of the
// alignment from the prompt's start; a sequence whose step budget does not reach such a point
// waits for a step whose does; where no step can (caps below the alignment) the budget's cut
// stands and the next chunk returns to the grid; the last chunk of a prompt is whatever is left.
TEST(SchedulerTest, ChunksEndAtMultiplesOfTheAlignmentWhereTheyCan) {
  SchedulerConfig c = TinyConfig();
  c.max_num_batched_tokens = 16;
  c.prefill_chunk_alignment = 6;
  Driver d(c, kVocab);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Prompt(29, 100), 2)).ok());
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(12));  // 16 → 12: ends at 12
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(12));  // 12 → 24
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(5));   // the rest of the prompt, off the grid
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(1));   // decode
  // 5 tokens a step at most (threshold), less than the alignment.
  c.long_prefill_token_threshold = 5;
  Driver e(c, kVocab);
  ASSERT_TRUE(e.scheduler().Add(MakeRequest("b", Prompt(12, 200), 1)).ok());
  EXPECT_THAT(ChunkSizes(e.Step()), ElementsAre(5));  // 0 → 5: no multiple of 6 in reach
  EXPECT_THAT(ChunkSizes(e.Step()), ElementsAre(1));  // 5 → 6: back on the grid
  EXPECT_THAT(ChunkSizes(e.Step()), ElementsAre(5));  // 6 → 11
  EXPECT_THAT(ChunkSizes(e.Step()), ElementsAre(1));  // the rest
  ExpectHealthy(e);
  ExpectHealthy(d);

  // While a decodes, prompt chunks get 5 tokens a step: b's first grid point (6) is out of
  // reach, so b waits until a finishes.
  c.long_prefill_token_threshold = 0;
  Driver f(c, kVocab);
  f.scheduler().SetPrefillTokensWithDecodes(5);
  ASSERT_TRUE(f.scheduler().Add(MakeRequest("a", Prompt(4, 300), 3)).ok());
  EXPECT_THAT(ChunkSizes(f.Step()), ElementsAre(4));  // a's prompt; it samples
  ASSERT_TRUE(f.scheduler().Add(MakeRequest("b", Prompt(20, 400), 1)).ok());
  EXPECT_THAT(ChunkSizes(f.Step()), ElementsAre(1));   // a decodes, b waits
  EXPECT_THAT(ChunkSizes(f.Step()), ElementsAre(1));   // a's last token
  EXPECT_THAT(ChunkSizes(f.Step()), ElementsAre(12));  // b alone: 16 → 12
  EXPECT_THAT(ChunkSizes(f.Step()), ElementsAre(8));   // the rest
  ExpectHealthy(f);
}

// SetPrefillTokensWithDecodes: while a step decodes, all its prompt chunks together stay within
// the cap (partial prefills and admissions alike); a step without decodes takes the budget.
TEST(SchedulerTest, PrefillCapAppliesOnlyToStepsWithDecodes) {
  Driver d(TinyConfig(), kVocab);
  d.scheduler().SetPrefillTokensWithDecodes(5);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Prompt(12, 100), 8)).ok());
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(12));  // nothing decodes: the whole prompt
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("b", Prompt(9, 200), 1)).ok());
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("c", Prompt(3, 300), 1)).ok());
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(1, 5));     // a decodes, b's first 5
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(1, 4, 1));  // b's last 4, then 1 of c
  EXPECT_EQ(d.scheduler().stats().num_prefill_tokens, 5);
  d.scheduler().SetPrefillTokensWithDecodes(0);  // off: the budget (16) alone
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(1, 2));
  ExpectHealthy(d);
}

TEST(SchedulerTest, DecodesFirstThenPartialPrefillsThenAdmissions) {
  SchedulerConfig c = TinyConfig();
  c.max_num_batched_tokens = 8;
  Driver d(c, kVocab);
  absl::StatusOr<SequenceId> a = d.scheduler().Add(MakeRequest("a", Prompt(4, 100), 8));
  ASSERT_TRUE(a.ok());
  d.Step();  // a: prefill of 4, samples its first token
  absl::StatusOr<SequenceId> b = d.scheduler().Add(MakeRequest("b", Prompt(20, 200), 1));
  ASSERT_TRUE(b.ok());
  StepPlan p2 = d.Step();
  EXPECT_THAT(SeqIds(p2), ElementsAre(*a, *b));
  EXPECT_THAT(ChunkSizes(p2), ElementsAre(1, 7));
  absl::StatusOr<SequenceId> e = d.scheduler().Add(MakeRequest("c", Prompt(2, 300), 1));
  ASSERT_TRUE(e.ok());
  // Budget 8: a's decode, then b, which leaves c (waiting) a quarter of the 7 left: 1 token.
  StepPlan p3 = d.Step();
  EXPECT_THAT(SeqIds(p3), ElementsAre(*a, *b, *e));
  EXPECT_THAT(ChunkSizes(p3), ElementsAre(1, 6, 1));
  EXPECT_EQ(p3.sequences[1].num_computed_tokens, 7);
  EXPECT_EQ(d.scheduler().stats().num_waiting, 0);
  EXPECT_EQ(d.scheduler().stats().num_decode_tokens, 1);
  EXPECT_EQ(d.scheduler().stats().num_prefill_tokens, 7);
  StepPlan p4 = d.Step();  // decodes (a, and c's last prompt token) first, then b's last 7
  EXPECT_THAT(SeqIds(p4), ElementsAre(*a, *e, *b));
  EXPECT_THAT(ChunkSizes(p4), ElementsAre(1, 1, 6));
  ExpectHealthy(d);
}

TEST(SchedulerTest, WaitingRequestGetsAShareBesideALongPrefill) {
  Driver d(TinyConfig(), kVocab);  // budget 16
  absl::StatusOr<SequenceId> a = d.scheduler().Add(MakeRequest("a", Prompt(31, 100), 1));
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(ChunkSizes(d.Step()), ElementsAre(16));
  EXPECT_EQ(d.scheduler().stats().num_prefill_tokens_computed, 16);
  EXPECT_EQ(d.scheduler().stats().num_prefill_tokens_remaining, 15);
  absl::StatusOr<SequenceId> b = d.scheduler().Add(MakeRequest("b", Prompt(2, 200), 1));
  ASSERT_TRUE(b.ok());
  // a would take all 16 (15 left); it leaves b's 2 tokens (at most a quarter of the budget).
  StepPlan p2 = d.Step();
  EXPECT_THAT(SeqIds(p2), ElementsAre(*a, *b));
  EXPECT_THAT(ChunkSizes(p2), ElementsAre(14, 2));
  EXPECT_EQ(d.scheduler().stats().num_prefill_tokens_remaining, 1);  // b is done: a's last
  StepPlan p3 = d.Step();
  EXPECT_THAT(ChunkSizes(p3), ElementsAre(1));
  EXPECT_EQ(d.scheduler().stats().num_prefill_tokens_remaining, 0);
  ExpectHealthy(d);
}

TEST(SchedulerTest, TokenBudgetSplitsAdmissions) {
  SchedulerConfig c = TinyConfig();
  c.max_num_batched_tokens = 8;
  Driver d(c, kVocab);
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(d.scheduler().Add(MakeRequest(id, Prompt(5, 100), 4)).ok());
  }
  StepPlan p1 = d.Step();
  EXPECT_THAT(SeqIds(p1), ElementsAre(0, 1));
  EXPECT_THAT(ChunkSizes(p1), ElementsAre(5, 3));
  EXPECT_EQ(p1.num_tokens(), 8);
  StepPlan p2 = d.Step();  // a decodes, b finishes its prompt, c gets the rest
  EXPECT_THAT(SeqIds(p2), ElementsAre(0, 1, 2));
  EXPECT_THAT(ChunkSizes(p2), ElementsAre(1, 2, 5));
  EXPECT_THAT(p2.sequences[2].block_table, ElementsAre(4, 5));
  ExpectHealthy(d);
}

TEST(SchedulerTest, MaxNumSeqsCapsRunningSequences) {
  SchedulerConfig c = TinyConfig();
  c.max_num_seqs = 2;
  Driver d(c, kVocab);
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(d.scheduler().Add(MakeRequest(id, Prompt(2, 100), 3)).ok());
  }
  StepPlan p1 = d.Step();
  EXPECT_THAT(SeqIds(p1), ElementsAre(0, 1));
  EXPECT_EQ(d.scheduler().stats().num_running, 2);
  EXPECT_EQ(d.scheduler().stats().num_waiting, 1);
  d.Step();
  StepPlan p3 = d.Step();  // a and b finish here (3 tokens each)
  EXPECT_THAT(SeqIds(p3), ElementsAre(0, 1));
  StepPlan p4 = d.Step();
  EXPECT_THAT(SeqIds(p4), ElementsAre(2));
  ExpectHealthy(d);
}

TEST(SchedulerTest, PriorityPolicyAdmitsLowerValueFirstThenArrival) {
  for (Policy policy : {Policy::kFcfs, Policy::kPriority}) {
    SchedulerConfig c = TinyConfig();
    c.policy = policy;
    Driver d(c, kVocab);
    const int priorities[] = {2, 0, 1, 0};
    const char* ids[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; ++i) {
      Request r = MakeRequest(ids[i], Prompt(2, 100 + 10 * i), 2);
      r.priority = priorities[i];
      ASSERT_TRUE(d.scheduler().Add(r).ok());
    }
    StepPlan p = d.Step();
    if (policy == Policy::kPriority) {
      EXPECT_THAT(SeqIds(p), ElementsAre(1, 3, 2, 0));
    } else {
      EXPECT_THAT(SeqIds(p), ElementsAre(0, 1, 2, 3));
    }
  }
}

// Two sequences, three blocks: the newer one is preempted when both need a second block, and
// is recomputed (prompt + its emitted token) after the older one finishes.
TEST(SchedulerTest, PreemptsNewestSequenceWhenBlocksRunOut) {
  SchedulerConfig c = TinyConfig();
  c.max_model_len = 12;
  c.num_blocks = 3;
  Driver d(c, kVocab);
  Request ra = MakeRequest("a", Prompt(4, 100), 5);
  Request rb = MakeRequest("b", Prompt(4, 200), 5);
  ASSERT_TRUE(d.scheduler().Add(ra).ok());
  ASSERT_TRUE(d.scheduler().Add(rb).ok());

  StepPlan p1 = d.Step();
  EXPECT_THAT(p1.sequences[0].block_table, ElementsAre(0));
  EXPECT_THAT(p1.sequences[1].block_table, ElementsAre(1));
  EXPECT_EQ(p1.sequences[1].slot, 1);
  ASSERT_EQ(d.output("b").size(), 1u);

  StepPlan p2 = d.Step();  // a takes the last block; b needs one and preempts itself
  EXPECT_THAT(SeqIds(p2), ElementsAre(0));
  EXPECT_THAT(p2.sequences[0].block_table, ElementsAre(0, 2));
  SchedulerStats s = d.scheduler().stats();
  EXPECT_EQ(s.num_preempted, 1);
  EXPECT_EQ(s.num_preempted_total, 1);
  EXPECT_EQ(s.num_running, 1);
  EXPECT_EQ(s.num_waiting, 1);
  EXPECT_EQ(s.num_free_blocks, 1);  // b's block 1 went back
  EXPECT_EQ(s.num_free_slots, 3);
  ExpectHealthy(d);

  // a decodes to its end (5 tokens; it computes 8, so two blocks suffice); b cannot come
  // back meanwhile: it needs two blocks for its 5 tokens and only block 1 is free.
  EXPECT_THAT(SeqIds(d.Step()), ElementsAre(0));
  EXPECT_THAT(SeqIds(d.Step()), ElementsAre(0));
  StepPlan p5 = d.Step();
  EXPECT_THAT(SeqIds(p5), ElementsAre(0));
  EXPECT_THAT(p5.sequences[0].block_table, ElementsAre(0, 2));
  EXPECT_EQ(d.finish_reason("a"), FinishReason::kLength);

  // b is recomputed from scratch: prompt + its one emitted token, in fresh blocks.
  StepPlan p6 = d.Step();
  ASSERT_EQ(p6.sequences.size(), 1u);
  const auto& b = p6.sequences[0];
  EXPECT_EQ(b.seq_id, 1);
  EXPECT_EQ(b.num_computed_tokens, 0);
  EXPECT_EQ(b.slot_init, SlotInit::kZero);
  std::vector<int32_t> recompute = Prompt(4, 200);
  recompute.push_back(d.output("b")[0]);
  EXPECT_EQ(b.token_ids, recompute);
  EXPECT_THAT(b.block_table, ElementsAre(0, 2));  // a freed 2 then 0 to the queue's front
  EXPECT_TRUE(b.sample);
  ASSERT_EQ(d.last_events().size(), 1u);
  EXPECT_EQ(d.last_events()[0].num_output_tokens, 2);  // the first token is not re-emitted

  d.RunUntilIdle();
  EXPECT_EQ(d.output("a"), Expected(ra));
  EXPECT_EQ(d.output("b"), Expected(rb));
  EXPECT_EQ(d.num_finish_events("b"), 1);
  EXPECT_EQ(d.scheduler().block_pool().num_free(), 3);
  ExpectHealthy(d);
}

// Under kPriority the victim is the lowest-priority sequence even when it was admitted first
// and already placed in the step being built: it is taken out of the plan again.
TEST(SchedulerTest, PreemptsLowestPriorityEvenIfAlreadyPlaced) {
  SchedulerConfig c = TinyConfig();
  c.policy = Policy::kPriority;
  c.max_model_len = 12;
  c.num_blocks = 3;
  Driver d(c, kVocab);
  Request rx = MakeRequest("x", Prompt(3, 100), 8);
  rx.priority = 5;
  Request ry = MakeRequest("y", Prompt(4, 200), 4);
  ry.priority = 0;
  ASSERT_TRUE(d.scheduler().Add(rx).ok());
  d.Step();  // x: [0, 3) in block 0
  ASSERT_TRUE(d.scheduler().Add(ry).ok());
  StepPlan p2 = d.Step();  // x decodes into block 0; y is admitted into block 1
  EXPECT_THAT(SeqIds(p2), ElementsAre(0, 1));
  StepPlan p3 = d.Step();  // x takes block 2; y needs a block: x is preempted and unplaced
  ASSERT_EQ(p3.sequences.size(), 1u);
  EXPECT_EQ(p3.sequences[0].seq_id, 1);
  EXPECT_THAT(p3.sequences[0].block_table, ElementsAre(1, 0));
  EXPECT_EQ(d.scheduler().stats().num_preempted, 1);
  EXPECT_EQ(d.scheduler().stats().num_decode_tokens, 1);
  EXPECT_EQ(d.scheduler().prefix_cache().num_pending_checkpoints(), 0);
  ExpectHealthy(d);
  d.RunUntilIdle();
  EXPECT_EQ(d.output("x"), Expected(rx));
  EXPECT_EQ(d.output("y"), Expected(ry));
  ExpectHealthy(d);
}

TEST(SchedulerTest, AbortFreesEverythingAtTheNextStep) {
  Driver d(TinyConfig(), kVocab);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Prompt(6, 100), 10)).ok());
  d.Step();
  EXPECT_EQ(d.scheduler().block_pool().num_held(), 2);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("w", Prompt(3, 100), 10)).ok());
  d.scheduler().Abort("a");
  d.scheduler().Abort("a");                             // twice: one abort
  d.scheduler().Abort("unknown");                       // ignored
  EXPECT_EQ(d.scheduler().block_pool().num_held(), 2);  // not before the next step
  EXPECT_TRUE(d.scheduler().HasWork());

  StepPlan p = d.Step();
  EXPECT_THAT(SeqIds(p), ElementsAre(1));  // a is gone; w runs
  ASSERT_GE(d.last_events().size(), 1u);
  const SequenceEvent& abort = d.last_events()[0];
  EXPECT_EQ(abort.request_id, "a");
  EXPECT_EQ(abort.finished, FinishReason::kAbort);
  EXPECT_FALSE(abort.token.has_value());
  EXPECT_EQ(abort.num_output_tokens, 1);
  EXPECT_EQ(d.scheduler().stats().num_aborted_total, 1);
  EXPECT_EQ(d.scheduler().block_pool().num_held(), 1);  // w's only
  ExpectHealthy(d);

  // Abort of a waiting request, and of one whose step is in flight (its token is dropped).
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("q", Prompt(3, 300), 10)).ok());
  d.scheduler().Abort("q");
  StepPlan p2 = d.scheduler().Schedule();
  d.scheduler().Abort("w");
  std::vector<SequenceEvent> events = d.scheduler().Commit(d.executor().Execute(p2));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].request_id, "q");
  EXPECT_EQ(events[0].finished, FinishReason::kAbort);
  EXPECT_TRUE(d.scheduler().HasWork());
  StepPlan p3 = d.Step();
  EXPECT_TRUE(p3.sequences.empty());
  ASSERT_EQ(d.last_events().size(), 1u);
  EXPECT_EQ(d.last_events()[0].request_id, "w");
  EXPECT_EQ(d.last_events()[0].finished, FinishReason::kAbort);
  EXPECT_FALSE(d.scheduler().HasWork());
  EXPECT_EQ(d.scheduler().block_pool().num_free(), 16);
  EXPECT_EQ(d.scheduler().slot_pool().num_free(), 4);
  ExpectHealthy(d);
}

TEST(SchedulerTest, StopsOnEosStopIdAndMaxTokens) {
  const Request base = MakeRequest("x", Prompt(5, 100), 12);
  const std::vector<int32_t> free_run = Expected(base);
  // The first output token that does not occur earlier in the output, at index >= 2.
  size_t k = 2;
  while (std::find(free_run.begin(), free_run.begin() + static_cast<long>(k), free_run[k]) !=
         free_run.begin() + static_cast<long>(k)) {
    ++k;
  }
  ASSERT_LT(k, free_run.size() - 1);
  const std::vector<int32_t> until_k(free_run.begin(), free_run.begin() + static_cast<long>(k) + 1);

  struct Case {
    const char* id;
    int64_t eos;
    bool ignore_eos;
    bool stop_id;
    FinishReason reason;
    std::vector<int32_t> output;
  };
  const Case cases[] = {
      {"eos", free_run[k], false, false, FinishReason::kStop, until_k},
      {"ignore_eos", free_run[k], true, false, FinishReason::kLength, free_run},
      {"stop_id", -1, true, true, FinishReason::kStop, until_k},
      {"length", -1, false, false, FinishReason::kLength, free_run},
  };
  Driver d(TinyConfig(), kVocab);
  for (const Case& c : cases) {
    Request r = base;
    r.request_id = c.id;
    r.eos_token_id = c.eos;
    r.ignore_eos = c.ignore_eos;
    if (c.stop_id) r.stop_token_ids = {7777, free_run[k]};
    ASSERT_TRUE(d.scheduler().Add(r).ok());
  }
  d.RunUntilIdle();
  for (const Case& c : cases) {
    EXPECT_EQ(d.output(c.id), c.output) << c.id;
    EXPECT_EQ(d.finish_reason(c.id), c.reason) << c.id;
    EXPECT_EQ(d.num_finish_events(c.id), 1) << c.id;
  }
  EXPECT_EQ(d.scheduler().stats().num_finished_total, 4);
  ExpectHealthy(d);
}

TEST(SchedulerTest, EventsCarryLogprobsOnlyWhenAsked) {
  Driver d(TinyConfig(), kVocab);
  Request with = MakeRequest("with", Prompt(3, 100), 1);
  with.num_logprobs = 2;
  ASSERT_TRUE(d.scheduler().Add(with).ok());
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("without", Prompt(3, 100), 1)).ok());
  StepPlan p = d.Step();
  EXPECT_EQ(p.sequences[0].num_logprobs, 2);
  ASSERT_NE(p.sequences[0].sampler, nullptr);
  ASSERT_EQ(d.last_events().size(), 2u);
  const SequenceEvent& e = d.last_events()[0];
  int32_t t = *e.token;
  EXPECT_EQ(e.logprob, FakeExecutor::Logprob(t));
  ASSERT_EQ(e.top_logprobs.size(), 2u);
  EXPECT_EQ(e.top_logprobs[1].token_id, (t + 1) % kVocab);
  EXPECT_TRUE(d.last_events()[1].top_logprobs.empty());
  EXPECT_EQ(d.last_events()[1].logprob, 0.0f);
}

TEST(SchedulerTest, AddValidatesTheRequest) {
  Scheduler s(TinyConfig());  // max_model_len 32
  absl::StatusOr<SequenceId> r = s.Add(MakeRequest("a", {}, 4));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("prompt is empty"));

  r = s.Add(MakeRequest("a", Prompt(30, 1), 3));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("prompt (30 tokens) + max_tokens (3) = 33"));
  EXPECT_THAT(r.status().message(), HasSubstr("max_model_len (32)"));

  r = s.Add(MakeRequest("a", Prompt(3, 1), 0));
  EXPECT_THAT(r.status().message(), HasSubstr("max_tokens must be >= 1, got 0"));
  r = s.Add(MakeRequest("a", {1, -2}, 1));
  EXPECT_THAT(r.status().message(), HasSubstr("negative token id -2"));

  EXPECT_TRUE(s.Add(MakeRequest("a", Prompt(29, 1), 3)).ok());  // exactly max_model_len
  r = s.Add(MakeRequest("a", Prompt(3, 1), 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s.num_waiting(), 1);
}

TEST(SchedulerTest, RequestIdIsReusableAfterFinish) {
  Driver d(TinyConfig(), kVocab);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Prompt(3, 1), 1)).ok());
  d.RunUntilIdle();
  absl::StatusOr<SequenceId> again = d.scheduler().Add(MakeRequest("a", Prompt(3, 1), 1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 1);
}

TEST(SchedulerTest, ModelWithoutKdaLayersUsesNoSlots) {
  SchedulerConfig c = TinyConfig();
  c.has_kda_layers = false;
  c.num_slots = 0;
  Driver d(c, kVocab);
  Request r = MakeRequest("a", Prompt(6, 1), 3);
  ASSERT_TRUE(d.scheduler().Add(r).ok());
  StepPlan p = d.Step();
  EXPECT_EQ(p.sequences[0].slot, -1);
  d.RunUntilIdle();
  EXPECT_EQ(d.output("a"), Expected(r));
  ExpectHealthy(d);
}

TEST(SchedulerTest, CommitRejectsResultOfAnotherStep) {
  Scheduler s(TinyConfig());
  ASSERT_TRUE(s.Add(MakeRequest("a", Prompt(3, 1), 1)).ok());
  StepPlan p = s.Schedule();
  engine::StepResult wrong;
  wrong.step_id = p.step_id + 1;
  EXPECT_DEATH(s.Commit(wrong), "another step");
}

// Speculative decoding on a 2-token fake model (lookup drafts are plentiful): no drafts on a
// prompt chunk; a decode step carries the proposer's draft after its token; the next step
// starts after the accepted drafts (nothing is recomputed, the executor kept only those);
// drafting needs no spare state slot; outputs stay the model's; disable_by_batch_size turns
// drafting off for large batches.
TEST(SchedulerTest, SpeculativeDraftsFollowPromptLookupAndStopAtLargeBatches) {
  SchedulerConfig c = TinyConfig();
  c.num_speculative_tokens = 3;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 2;
  Driver d(c, /*vocab_size=*/2);
  const Request a = MakeRequest("a", {0, 1, 0, 1, 0, 1}, 12);
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  StepPlan prefill = d.Step();
  ASSERT_EQ(prefill.sequences.size(), 1u);
  EXPECT_EQ(prefill.sequences[0].num_draft_tokens, 0);
  const int32_t first = d.output("a").at(0);
  std::vector<int32_t> context = a.prompt;
  context.push_back(first);
  std::vector<int32_t> draft;
  ASSERT_EQ(ProposeNgramDraft(context, 1, 2, 3, &draft), 3);
  StepPlan decode = d.Step();
  ASSERT_EQ(decode.sequences.size(), 1u);
  const engine::ScheduledSequence& s = decode.sequences[0];
  EXPECT_EQ(s.num_draft_tokens, 3);
  EXPECT_EQ(s.token_ids, (std::vector<int32_t>{first, draft[0], draft[1], draft[2]}));
  EXPECT_EQ(s.num_computed_tokens, 6);
  const auto accepted = static_cast<int64_t>(d.output("a").size()) - 2;
  ASSERT_GE(accepted, 0);
  StepPlan next = d.Step();
  ASSERT_EQ(next.sequences.size(), 1u);
  EXPECT_EQ(next.sequences[0].num_computed_tokens, 7 + accepted);
  EXPECT_EQ(next.sequences[0].token_ids.size(), 1u + next.sequences[0].num_draft_tokens);
  EXPECT_EQ(next.sequences[0].token_ids.at(0), d.output("a").at(static_cast<size_t>(accepted + 1)));
  d.RunUntilIdle();
  EXPECT_EQ(d.output("a"), FakeExecutor::ExpectedOutput(a, 2));
  EXPECT_GT(d.scheduler().stats().num_spec_drafts_total, 0);
  ExpectHealthy(d);

  SchedulerConfig one_slot = c;
  one_slot.num_slots = 1;
  one_slot.max_num_seqs = 1;
  Driver full(one_slot, /*vocab_size=*/2);
  ASSERT_TRUE(full.scheduler().Add(a).ok());
  full.RunUntilIdle();
  EXPECT_EQ(full.output("a"), FakeExecutor::ExpectedOutput(a, 2));
  EXPECT_GT(full.scheduler().stats().num_spec_drafts_total, 0) << "every slot is in use";
  ExpectHealthy(full);

  for (int threshold : {2, 3}) {
    c.speculative_disable_by_batch_size = threshold;
    Driver two(c, /*vocab_size=*/2);
    const Request x = MakeRequest("x", {0, 1, 0, 1, 0, 1}, 10);
    const Request y = MakeRequest("y", {1, 0, 1, 0, 1, 0}, 10);
    ASSERT_TRUE(two.scheduler().Add(x).ok());
    ASSERT_TRUE(two.scheduler().Add(y).ok());
    two.RunUntilIdle();
    EXPECT_EQ(two.output("x"), FakeExecutor::ExpectedOutput(x, 2));
    EXPECT_EQ(two.output("y"), FakeExecutor::ExpectedOutput(y, 2));
    const int64_t drafts = two.scheduler().stats().num_spec_drafts_total;
    if (threshold == 2) {
      EXPECT_EQ(drafts, 0) << "two running sequences reach disable_by_batch_size 2";
    } else {
      EXPECT_GT(drafts, 0) << "two running sequences stay under disable_by_batch_size 3";
    }
    ExpectHealthy(two);
  }
}

}  // namespace
}  // namespace strata::scheduler
