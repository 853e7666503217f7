// Prefix caching through the scheduler (block_size 4): chunks run through KDA checkpoint
// boundaries, saving the state at each; hits need a committed checkpoint at exactly the
// matched boundary, the last prompt token is never matched, salts separate caches, and a
// recomputed sequence hits its own cached prefix. The FakeExecutor checks that every restored
// state equals the cached context.
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
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
using testing::MakeRequest;
using testing::Prompt;

constexpr int32_t kPrefixVocab = 1000;

SchedulerConfig PrefixConfig() {
  SchedulerConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 16;
  c.max_model_len = 32;
  c.block_size = 4;
  c.num_blocks = 16;
  c.num_slots = 4;
  c.num_checkpoint_slots = 4;
  c.checkpoint_every_n_blocks = 2;
  c.enable_prefix_caching = true;
  return c;
}

// Prompt-end checkpoints only (no stride), `checkpoint_slots` of their own, and `slots` live
// slots (as many sequences at once).
SchedulerConfig FewSlotsConfig(int32_t checkpoint_slots, int32_t slots) {
  SchedulerConfig c = PrefixConfig();
  c.checkpoint_every_n_blocks = 0;
  c.num_checkpoint_slots = checkpoint_slots;
  c.num_slots = c.max_num_seqs = slots;
  return c;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> PrefixExpected(const Request& r) {
  return FakeExecutor::ExpectedOutput(r, kPrefixVocab);
}

// The tokens at which a step's sequence saves checkpoints (absolute positions).
std::vector<int64_t> SavePoints(const engine::ScheduledSequence& s) {
  std::vector<int64_t> points;
  for (const engine::CheckpointSave& save : s.save_checkpoints) {
    points.push_back(s.num_computed_tokens + save.num_tokens);
  }
  return points;
}

struct Chunk {
  int64_t begin;
  int64_t size;
  std::vector<int64_t> saves;
  bool sample;
};

Chunk Only(const StepPlan& plan) {
  EXPECT_EQ(plan.sequences.size(), 1u);
  const auto& s = plan.sequences.at(0);
  return {s.num_computed_tokens, static_cast<int64_t>(s.token_ids.size()), SavePoints(s), s.sample};
}

MATCHER_P4(IsChunk, begin, size, saves, sample, "") {
  return arg.begin == begin && arg.size == size && arg.saves == std::vector<int64_t>(saves) &&
         arg.sample == sample;
}

using Saves = std::vector<int64_t>;

// The plan's only sequence starts from a checkpoint after `num_tokens` tokens.
void ExpectHitAt(const StepPlan& p, int64_t num_tokens) {
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].slot_init, SlotInit::kFromCheckpoint);
  EXPECT_EQ(p.sequences[0].num_computed_tokens, num_tokens);
}

TEST(SchedulerPrefixTest, NoCheckpointsWithoutPrefixCaching) {
  SchedulerConfig c = PrefixConfig();
  c.enable_prefix_caching = false;
  Driver d(c, kPrefixVocab);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Prompt(19, 100), 1)).ok());
  EXPECT_THAT(Only(d.Step()), IsChunk(0, 16, Saves{}, false));
  EXPECT_THAT(Only(d.Step()), IsChunk(16, 3, Saves{}, true));
  EXPECT_EQ(d.scheduler().prefix_cache().num_checkpoints(), 0);
  EXPECT_EQ(d.scheduler().stats().num_prefix_queries, 0);
}

TEST(SchedulerPrefixTest, SecondRequestStartsFromTheSharedPrefixCheckpoint) {
  Driver d(PrefixConfig(), kPrefixVocab);
  const std::vector<int32_t> shared = Prompt(16, 100);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Concat(shared, {7, 8}), 1)).ok());
  d.RunUntilIdle();  // chunks [0, 8) -> checkpoint 0, [8, 16) -> checkpoint 1, [16, 18)
  ASSERT_EQ(d.scheduler().prefix_cache().num_checkpoints(), 2);

  Request b = MakeRequest("b", Concat(shared, {900, 901, 902}), 2);
  ASSERT_TRUE(d.scheduler().Add(b).ok());
  StepPlan p = d.Step();
  ASSERT_EQ(p.sequences.size(), 1u);
  const auto& s = p.sequences[0];
  EXPECT_EQ(s.slot_init, SlotInit::kFromCheckpoint);
  EXPECT_EQ(s.source_checkpoint, 1);
  EXPECT_EQ(s.num_computed_tokens, 16);
  EXPECT_THAT(s.token_ids, ElementsAre(900, 901, 902));
  // a's blocks 0-3 are shared; a's partial block 4 went to the front of the free queue.
  EXPECT_THAT(s.block_table, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_TRUE(s.sample);
  ASSERT_EQ(d.last_events().size(), 1u);
  EXPECT_EQ(d.last_events()[0].num_cached_tokens, 16);

  SchedulerStats st = d.scheduler().stats();
  EXPECT_EQ(st.num_prefix_queries, 2);
  EXPECT_EQ(st.num_prefix_query_tokens, 16 + 16);  // a: 4 full blocks of 17; b: 4 of 18
  EXPECT_EQ(st.num_prefix_hits, 1);
  EXPECT_EQ(st.num_prefix_hit_tokens, 16);
  d.RunUntilIdle();
  EXPECT_EQ(d.output("b"), PrefixExpected(b));
  ExpectHealthy(d);
}

// ResetPrefixCache forgets what no sequence holds: the finished request's cached blocks and
// the checkpoints at their boundaries, so the same prefix misses afterwards; a running
// sequence's blocks keep their hashes.
TEST(SchedulerPrefixTest, ResetPrefixCacheForgetsWhatNoSequenceHolds) {
  Driver d(PrefixConfig(), kPrefixVocab);
  const std::vector<int32_t> shared = Prompt(16, 100);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Concat(shared, {7, 8}), 1)).ok());
  d.RunUntilIdle();
  ASSERT_EQ(d.scheduler().prefix_cache().num_checkpoints(), 2);
  ASSERT_EQ(d.scheduler().block_pool().num_cached(), 4);
  // A running sequence holding a cached block of its own: long prompt, many tokens to go.
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("runner", Prompt(9, 600), 8)).ok());
  d.Step();
  d.Step();
  const int32_t held_cached = d.scheduler().block_pool().num_cached() - 4;
  const int32_t held_checkpoints = d.scheduler().prefix_cache().num_checkpoints() - 2;
  ASSERT_GT(held_cached, 0);

  const Scheduler::PrefixCacheReset reset = d.scheduler().ResetPrefixCache();
  EXPECT_EQ(reset.blocks, 4);       // a's four full blocks
  EXPECT_EQ(reset.checkpoints, 2);  // and its checkpoints at 8 and 16
  EXPECT_EQ(d.scheduler().block_pool().num_cached(), held_cached);
  // The runner's own checkpoint sits on a block it holds: still valid, kept.
  EXPECT_EQ(d.scheduler().prefix_cache().num_checkpoints(), held_checkpoints);
  ExpectHealthy(d);

  Request b = MakeRequest("b", Concat(shared, {900, 901}), 2);
  ASSERT_TRUE(d.scheduler().Add(b).ok());
  const int64_t hits_before = d.scheduler().stats().num_prefix_hit_tokens;
  d.RunUntilIdle();
  EXPECT_EQ(d.scheduler().stats().num_prefix_hit_tokens, hits_before);  // b missed
  EXPECT_EQ(d.output("b"), PrefixExpected(b));
  EXPECT_EQ(d.output("runner"), PrefixExpected(MakeRequest("runner", Prompt(9, 600), 8)));
  ExpectHealthy(d);
}

TEST(SchedulerPrefixTest, SharedBlocksAreReferencedByBothSequences) {
  Driver d(PrefixConfig(), kPrefixVocab);
  const std::vector<int32_t> shared = Prompt(8, 100);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Concat(shared, {1, 2}), 10)).ok());
  d.Step();  // a: [0, 8) with checkpoint
  d.Step();  // a: [8, 10), samples
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("b", Concat(shared, {3}), 10)).ok());
  StepPlan p = d.Step();
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(p.sequences[1].num_computed_tokens, 8);
  EXPECT_THAT(p.sequences[1].block_table, ElementsAre(0, 1, 3));
  EXPECT_EQ(d.scheduler().block_pool().ref_count(0), 2);
  EXPECT_EQ(d.scheduler().block_pool().ref_count(1), 2);
  EXPECT_EQ(d.scheduler().block_pool().ref_count(2), 1);
  ExpectHealthy(d);
}

// With checkpoints only at prompt ends, a request sharing one block but not the checkpointed
// boundary gets no hit on a KDA model, and a one-block hit on a model without KDA layers.
TEST(SchedulerPrefixTest, KdaHitNeedsACheckpointAtTheBoundary) {
  for (bool kda : {true, false}) {
    SchedulerConfig c = PrefixConfig();
    c.checkpoint_every_n_blocks = 0;
    c.has_kda_layers = kda;
    Driver d(c, kPrefixVocab);
    ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Prompt(10, 100), 1)).ok());
    // With KDA layers the state at the prompt-end boundary 8 is saved on the way.
    EXPECT_THAT(Only(d.Step()), IsChunk(0, 10, kda ? Saves{8} : Saves{}, true));

    Request b = MakeRequest("b", Concat(Prompt(6, 100), {500, 501, 502}), 2);
    ASSERT_TRUE(d.scheduler().Add(b).ok());
    StepPlan p = d.Step();
    ASSERT_EQ(p.sequences.size(), 1u);
    EXPECT_EQ(p.sequences[0].num_computed_tokens, kda ? 0 : 4) << kda;
    EXPECT_EQ(p.sequences[0].slot_init, SlotInit::kZero) << kda;
    EXPECT_EQ(p.sequences[0].token_ids.size(), kda ? 9u : 5u) << kda;
    d.RunUntilIdle();
    EXPECT_EQ(d.output("b"), PrefixExpected(b));
    ExpectHealthy(d);
  }
}

TEST(SchedulerPrefixTest, NeverMatchesTheWholePrompt) {
  SchedulerConfig c = PrefixConfig();
  c.checkpoint_every_n_blocks = 1;
  Driver d(c, kPrefixVocab);
  const Request a = MakeRequest("a", Prompt(8, 100), 1);
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  d.RunUntilIdle();  // checkpoints at 4 (id 0) and 8 (id 1)
  ASSERT_EQ(d.scheduler().prefix_cache().num_checkpoints(), 2);

  Request b = MakeRequest("b", Prompt(8, 100), 3);
  ASSERT_TRUE(d.scheduler().Add(b).ok());
  StepPlan p = d.Step();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].num_computed_tokens, 4);  // not 8: the last token is computed
  EXPECT_EQ(p.sequences[0].source_checkpoint, 0);
  EXPECT_EQ(p.sequences[0].token_ids, Prompt(4, 104));
  EXPECT_TRUE(p.sequences[0].sample);
  d.RunUntilIdle();
  EXPECT_EQ(d.output("b"), PrefixExpected(b));
  EXPECT_EQ(d.output("b")[0], d.output("a")[0]);
  ExpectHealthy(d);
}

TEST(SchedulerPrefixTest, CacheSaltSeparatesPrefixes) {
  Driver d(PrefixConfig(), kPrefixVocab);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Prompt(18, 100), 1)).ok());
  d.RunUntilIdle();
  Request b = MakeRequest("b", Prompt(18, 100), 1);
  b.cache_salt = 7;
  ASSERT_TRUE(d.scheduler().Add(b).ok());
  StepPlan p = d.Step();
  EXPECT_EQ(p.sequences[0].num_computed_tokens, 0);
  EXPECT_EQ(p.sequences[0].slot_init, SlotInit::kZero);
  EXPECT_EQ(d.scheduler().stats().num_prefix_hits, 0);
}

// b is preempted after its prompt block was cached with a checkpoint; when it comes back it
// restarts from that checkpoint and recomputes only its emitted tokens.
TEST(SchedulerPrefixTest, RecomputedSequenceHitsItsOwnCachedPrefix) {
  SchedulerConfig c = PrefixConfig();
  c.checkpoint_every_n_blocks = 1;
  c.num_blocks = 4;
  c.max_model_len = 16;
  c.long_prefill_token_threshold = 4;  // prefill chunks of one block
  Driver d(c, kPrefixVocab);
  Request a = MakeRequest("a", Prompt(8, 100), 2);
  Request b = MakeRequest("b", Prompt(4, 200), 8);
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  ASSERT_TRUE(d.scheduler().Add(b).ok());
  d.Step();                // a [0, 4) -> checkpoint 0; b [0, 4) -> checkpoint 1, samples
  d.Step();                // a [4, 8) -> checkpoint 2, samples; b decodes into block 3: pool full
  StepPlan p3 = d.Step();  // a needs a block: b (newest) is preempted; a finishes
  EXPECT_EQ(p3.sequences.size(), 1u);
  EXPECT_EQ(d.scheduler().stats().num_preempted_total, 1);
  EXPECT_EQ(d.finish_reason("a"), FinishReason::kLength);
  const std::vector<int32_t> emitted = d.output("b");
  ASSERT_EQ(emitted.size(), 2u);

  StepPlan p4 = d.Step();
  ASSERT_EQ(p4.sequences.size(), 1u);
  const auto& s = p4.sequences[0];
  EXPECT_EQ(s.slot_init, SlotInit::kFromCheckpoint);
  EXPECT_EQ(s.source_checkpoint, 1);
  EXPECT_EQ(s.num_computed_tokens, 4);
  EXPECT_EQ(s.token_ids, emitted);  // only the emitted tokens are recomputed
  EXPECT_EQ(s.block_table[0], 1);   // its own cached prompt block
  ASSERT_EQ(d.last_events().size(), 1u);
  EXPECT_EQ(d.last_events()[0].num_output_tokens, 3);
  EXPECT_EQ(d.last_events()[0].num_cached_tokens, 0);  // first admission had no hit
  d.RunUntilIdle();
  EXPECT_EQ(d.output("a"), PrefixExpected(a));
  EXPECT_EQ(d.output("b"), PrefixExpected(b));
  EXPECT_EQ(d.scheduler().block_pool().num_free(), 4);
  ExpectHealthy(d);
}

TEST(SchedulerPrefixTest, PromptScoringSkipsTheCacheAndFitsTheScoreBudget) {
  SchedulerConfig c = PrefixConfig();
  c.max_scored_tokens_per_step = 5;
  Driver d(c, kPrefixVocab);
  const std::vector<int32_t> shared = Prompt(16, 100);
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("a", Concat(shared, {7, 8}), 1)).ok());
  d.RunUntilIdle();
  ASSERT_EQ(d.scheduler().prefix_cache().num_checkpoints(), 2);

  // Same prefix, but every position must be scored: no hit, chunks of at most 5 scored rows
  // (the last chunk's final token only samples), targets are the next prompt tokens.
  Request b = MakeRequest("b", Concat(shared, {900, 901}), 2);
  b.prompt_logprobs = 3;
  ASSERT_TRUE(d.scheduler().Add(b).ok());
  StepPlan p = d.Step();
  EXPECT_THAT(Only(p), IsChunk(0, 5, Saves{}, false));
  EXPECT_EQ(p.sequences[0].slot_init, SlotInit::kZero);
  EXPECT_THAT(p.sequences[0].score_targets, ElementsAre(101, 102, 103, 104, 105));
  EXPECT_EQ(p.sequences[0].num_score_logprobs, 3);
  // a's checkpoints at 8 and 16 are there already: no saves.
  EXPECT_THAT(Only(d.Step()), IsChunk(5, 5, Saves{}, false));
  EXPECT_THAT(Only(d.Step()), IsChunk(10, 5, Saves{}, false));
  p = d.Step();
  EXPECT_THAT(Only(p), IsChunk(15, 3, Saves{}, true));  // scores 15 and 16, samples
  EXPECT_THAT(p.sequences[0].score_targets, ElementsAre(900, 901));
  ASSERT_EQ(d.last_events().size(), 1u);
  EXPECT_EQ(d.last_events()[0].num_cached_tokens, 0);
  const std::vector<engine::TokenScore>& scores = d.last_events()[0].prompt_scores;
  const std::vector<engine::TokenScore> want = FakeExecutor::ExpectedPromptScores(b);
  ASSERT_EQ(scores.size(), 17u);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(scores[i].token_id, want[i].token_id) << i;
    EXPECT_EQ(scores[i].logprob, want[i].logprob) << i;
    EXPECT_EQ(scores[i].top.size(), 3u) << i;
  }
  p = d.Step();  // the decode: no targets, no scores
  EXPECT_THAT(Only(p), IsChunk(18, 1, Saves{}, true));
  EXPECT_TRUE(p.sequences[0].score_targets.empty());
  ASSERT_EQ(d.last_events().size(), 1u);
  EXPECT_TRUE(d.last_events()[0].prompt_scores.empty());
  EXPECT_EQ(d.output("b"), PrefixExpected(b));
  EXPECT_EQ(d.scheduler().stats().num_prefix_hits, 0);
  ExpectHealthy(d);
}

// n > 1 choices (or requests with the same long system prompt) arriving together: the first
// computes the shared prefix, the others wait for it to be cached, then start from its
// checkpoint instead of computing it again; a request with another prompt is not held up.
// Requests sharing a system prompt that no checkpoint boundary ends: the first caches the
// blocks, the second misses (no state there) but saves one where its prompt parts from the
// cached blocks, and from the third on every request hits there.
TEST(SchedulerPrefixTest, ABranchPointGetsACheckpointSoLaterRequestsHit) {
  SchedulerConfig c = PrefixConfig();
  c.checkpoint_every_n_blocks = 0;  // prompt ends only
  Driver d(c, kPrefixVocab);
  const std::vector<int32_t> system = Prompt(10, 100);  // blocks [0, 4) and [4, 8) are whole
  const Request a = MakeRequest("a", Concat(system, {1, 2, 3}), 1);
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  EXPECT_THAT(Only(d.Step()), IsChunk(0, 13, Saves{12}, true));
  d.RunUntilIdle();

  const Request b = MakeRequest("b", Concat(system, {900, 901, 902}), 1);
  ASSERT_TRUE(d.scheduler().Add(b).ok());
  EXPECT_THAT(Only(d.Step()), IsChunk(0, 13, (Saves{8, 12}), true));  // a miss; 8 is saved
  d.RunUntilIdle();

  for (const char* id : {"c", "d"}) {
    const Request r = MakeRequest(id, Concat(system, {500, 501}), 2);
    ASSERT_TRUE(d.scheduler().Add(r).ok());
    ExpectHitAt(d.Step(), 8);
    d.RunUntilIdle();
    EXPECT_EQ(d.output(id), PrefixExpected(r)) << id;
  }
  EXPECT_EQ(d.output("b"), PrefixExpected(b));
  EXPECT_EQ(d.scheduler().stats().num_prefix_hit_tokens, 2 * 8);
  ExpectHealthy(d);
}

// Requests arriving together: the later ones wait while the first computes the shared
// blocks, and the first saves its state where they part, so that they hit there.
TEST(SchedulerPrefixTest, RequestsWaitingForASharedPrefixHitWhereItEnds) {
  SchedulerConfig c = PrefixConfig();
  c.checkpoint_every_n_blocks = 0;
  c.max_model_len = 24;
  Driver d(c, kPrefixVocab);
  const std::vector<int32_t> system = Prompt(9, 100);  // two whole blocks, 8 tokens
  const Request a = MakeRequest("a", Concat(system, {1, 2, 3, 4, 5, 6}), 2);  // 15 tokens
  const Request b = MakeRequest("b", Concat(system, {900, 901}), 2);          // 11 tokens
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  ASSERT_TRUE(d.scheduler().Add(b).ok());
  // Step 1: a alone, saving at its prompt end 12 and at 8, where b's prompt parts from it.
  EXPECT_THAT(Only(d.Step()), IsChunk(0, 15, (Saves{8, 12}), true));
  EXPECT_EQ(d.scheduler().num_waiting(), 1);
  // Step 2: a decodes; b starts from the state at 8.
  const StepPlan p = d.Step();
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(p.sequences[1].slot_init, SlotInit::kFromCheckpoint);
  EXPECT_EQ(p.sequences[1].num_computed_tokens, 8);
  EXPECT_EQ(p.sequences[1].token_ids.size(), 3u);
  d.RunUntilIdle();
  EXPECT_EQ(d.output("a"), PrefixExpected(a));
  EXPECT_EQ(d.output("b"), PrefixExpected(b));
  EXPECT_EQ(d.scheduler().stats().num_prefill_tokens_total, 15 + 3);
  ExpectHealthy(d);
}

// A conversation's next turn is its prompt, its output and a new message: it starts from the
// state at the last block boundary the first turn computed, not at that turn's prompt end.
TEST(SchedulerPrefixTest, TheNextTurnOfAConversationStartsPastItsLastOutput) {
  SchedulerConfig c = PrefixConfig();
  c.checkpoint_every_n_blocks = 0;
  Driver d(c, kPrefixVocab);
  const Request t1 = MakeRequest("t1", Prompt(10, 100), 9);  // computes 18 tokens of 19
  ASSERT_TRUE(d.scheduler().Add(t1).ok());
  EXPECT_THAT(Only(d.Step()), IsChunk(0, 10, Saves{8}, true));
  EXPECT_THAT(Only(d.Step()), IsChunk(10, 1, Saves{}, true));
  EXPECT_THAT(Only(d.Step()), IsChunk(11, 1, Saves{12}, true));  // past the prompt
  d.RunUntilIdle();                                              // ... and 16, which drops 12
  EXPECT_EQ(d.scheduler().prefix_cache().num_checkpoints(), 2);

  const Request t2 = MakeRequest("t2", Concat(Concat(t1.prompt, d.output("t1")), {7, 8, 9}), 2);
  ASSERT_TRUE(d.scheduler().Add(t2).ok());
  ExpectHitAt(d.Step(), 16);  // of 22
  d.RunUntilIdle();
  EXPECT_EQ(d.output("t2"), PrefixExpected(t2));
  ExpectHealthy(d);
}

// While its sequence runs, a checkpoint past the prompt sits at the cold end of the LRU: a
// prompt's reservation evicts it rather than another conversation's prompt-end checkpoint.
TEST(SchedulerPrefixTest, CheckpointsPastThePromptGiveWayWhileTheirSequenceRuns) {
  Driver d(FewSlotsConfig(2, 2), kPrefixVocab);  // b and c hold both: no live slot to lend
  const Request a = MakeRequest("a", Prompt(9, 100), 1);
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  d.RunUntilIdle();  // a's checkpoint at 8: the least recently used from now on
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("b", Prompt(3, 300), 4)).ok());
  d.Step();
  EXPECT_THAT(Only(d.Step()), IsChunk(3, 1, Saves{4}, true));  // b's, past its prompt
  ASSERT_TRUE(d.scheduler().Add(MakeRequest("c", Prompt(9, 500), 1)).ok());
  const StepPlan p = d.Step();  // b decodes; c's prompt end evicts b's checkpoint, not a's
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_THAT(SavePoints(p.sequences[1]), ElementsAre(8));
  d.RunUntilIdle();
  EXPECT_EQ(d.scheduler().stats().num_checkpoints_evicted, 1);

  const Request again = MakeRequest("again", Prompt(9, 100), 1);
  ASSERT_TRUE(d.scheduler().Add(again).ok());
  ExpectHitAt(d.Step(), 8);
  ExpectHealthy(d);
}

// Speculative decoding with prefix caching: a draft never carries the sequence onto or past
// a block boundary, so every boundary past the prompt is some step's save point.
TEST(SchedulerPrefixTest, DraftsStopShortOfEachBoundaryPastThePrompt) {
  SchedulerConfig c = PrefixConfig();
  c.checkpoint_every_n_blocks = 0;
  c.num_speculative_tokens = 3;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 2;
  Driver d(c, /*vocab_size=*/2);  // lookup drafts are plentiful
  const Request a = MakeRequest("a", {0, 1, 0, 1, 0, 1}, 20);
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  std::vector<int64_t> saved;
  int64_t num_drafts = 0;
  for (StepPlan p = d.Step(); !p.sequences.empty(); p = d.Step()) {
    const engine::ScheduledSequence& s = p.sequences[0];
    for (int64_t point : SavePoints(s)) saved.push_back(point);
    if (s.num_draft_tokens == 0) continue;
    num_drafts += s.num_draft_tokens;
    const int64_t end = s.num_computed_tokens + 1;  // without the drafts
    const int64_t end_drafted = end + s.num_draft_tokens;
    EXPECT_NE(end % 4, 0) << "a step with a save drafts nothing";
    EXPECT_EQ(end / 4, end_drafted / 4) << "drafts " << end << ".." << end_drafted;
  }
  EXPECT_GT(num_drafts, 0);
  EXPECT_EQ(d.output("a"), FakeExecutor::ExpectedOutput(a, 2));
  const int64_t computed = 6 + static_cast<int64_t>(d.output("a").size()) - 1;
  std::vector<int64_t> expected;
  for (int64_t b = 4; b <= computed; b += 4) expected.push_back(b);  // prompt end, then past it
  EXPECT_EQ(saved, expected);
  ExpectHealthy(d);
}

TEST(SchedulerPrefixTest, RequestsSharingAPrefixWaitForItInsteadOfRecomputingIt) {
  SchedulerConfig c = PrefixConfig();
  c.max_num_batched_tokens = 32;
  c.max_model_len = 64;
  c.num_blocks = 40;
  Driver d(c, kPrefixVocab);
  const std::vector<int32_t> prompt = Prompt(18, 100);  // checkpoints at 8 and 16
  std::vector<Request> requests;
  for (int i = 0; i < 3; ++i) {
    requests.push_back(MakeRequest(absl::StrCat("n", i), prompt, 3));
    ASSERT_TRUE(d.scheduler().Add(requests.back()).ok());
  }
  const Request other = MakeRequest("other", Prompt(10, 500), 2);
  ASSERT_TRUE(d.scheduler().Add(other).ok());
  // Step 1: the prompts of n0 (saving at 8 and 16) and `other`; n1, n2 wait.
  StepPlan p = d.Step();
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(p.sequences[0].token_ids.size(), 18u);
  EXPECT_THAT(SavePoints(p.sequences[0]), ElementsAre(8, 16));
  EXPECT_EQ(p.sequences[1].token_ids.size(), 10u);
  EXPECT_EQ(d.scheduler().num_waiting(), 2);
  d.RunUntilIdle();
  for (const Request& r : requests)
    EXPECT_EQ(d.output(r.request_id), PrefixExpected(r)) << r.request_id;
  EXPECT_EQ(d.output("other"), PrefixExpected(other));
  const SchedulerStats st = d.scheduler().stats();
  EXPECT_GT(st.num_prefix_waits, 0);
  EXPECT_EQ(st.num_prefix_hits, 2);
  EXPECT_EQ(st.num_prefix_hit_tokens, 2 * 16);  // each sibling computes only 2 of 18
  // 18 + 2 + 2 prompt tokens and 10 of `other`'s, against 3 × 18 + 10 without waiting.
  EXPECT_EQ(st.num_prefill_tokens_total, 18 + 2 + 2 + 10);
  ExpectHealthy(d);
}

TEST(SchedulerPrefixTest, ABlockAlignedPromptAgainHitsUpToItsLastBlock) {
  Driver d(PrefixConfig(), kPrefixVocab);
  const Request a = MakeRequest("a", Prompt(16, 100), 1);  // 4 whole blocks
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  d.RunUntilIdle();
  const Request again = MakeRequest("again", Prompt(16, 100), 2);
  ASSERT_TRUE(d.scheduler().Add(again).ok());
  const StepPlan p = d.Step();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].slot_init, SlotInit::kFromCheckpoint);
  EXPECT_EQ(p.sequences[0].num_computed_tokens, 12);  // all but the block of its last token
  d.RunUntilIdle();
  EXPECT_EQ(d.output("again"), PrefixExpected(again));
  ExpectHealthy(d);
}

// A chunk runs through its checkpoint boundaries: one step for the whole 16-token budget,
// saving at 8 (every 2 blocks) and 16 (the prompt's last block boundary) on the way; later the
// decode that fills block 5 saves at 20 (past the prompt), and the one that fills block 6 at 24,
// dropping the one at 20.
TEST(SchedulerPrefixTest, ChunksRunThroughCheckpointBoundariesSavingOnTheWay) {
  Driver d(PrefixConfig(), kPrefixVocab);
  Request r = MakeRequest("a", Prompt(19, 100), 6);
  ASSERT_TRUE(d.scheduler().Add(r).ok());
  StepPlan p = d.Step();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].token_ids.size(), 16u);  // the whole budget
  EXPECT_THAT(SavePoints(p.sequences[0]), ElementsAre(8, 16));
  EXPECT_EQ(d.scheduler().prefix_cache().num_checkpoints(), 2);
  p = d.Step();
  EXPECT_EQ(p.sequences[0].token_ids.size(), 3u);
  EXPECT_TRUE(p.sequences[0].sample);
  EXPECT_THAT(SavePoints(p.sequences[0]), ElementsAre());
  p = d.Step();  // the decode of token 19
  EXPECT_THAT(SavePoints(p.sequences[0]), ElementsAre(20));
  EXPECT_EQ(d.scheduler().stats().num_checkpoints, 3);
  d.RunUntilIdle();  // decodes 20..23
  EXPECT_EQ(d.output("a"), PrefixExpected(r));
  EXPECT_EQ(d.scheduler().stats().num_checkpoints, 3);  // 8, 16, 24
  ExpectHealthy(d);
}

// A prompt longer than a block but within the budget is one step (not a step ending at its
// last block boundary, then the rest); the next request sharing it starts from there.
TEST(SchedulerPrefixTest, APromptWithinTheBudgetIsOneStepWhereverItsBoundariesAre) {
  Driver d(PrefixConfig(), kPrefixVocab);
  const std::vector<int32_t> shared = Prompt(6, 100);
  const Request a = MakeRequest("a", shared, 1);
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  StepPlan p = d.Step();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].token_ids.size(), 6u);
  EXPECT_TRUE(p.sequences[0].sample);
  EXPECT_THAT(SavePoints(p.sequences[0]), ElementsAre(4));
  EXPECT_EQ(d.output("a"), PrefixExpected(a));

  const Request b = MakeRequest("b", Concat(shared, {900, 901, 902}), 3);
  ASSERT_TRUE(d.scheduler().Add(b).ok());
  p = d.Step();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].slot_init, SlotInit::kFromCheckpoint);
  EXPECT_EQ(p.sequences[0].num_computed_tokens, 4);
  EXPECT_THAT(SavePoints(p.sequences[0]), ElementsAre(8));  // b's last block boundary
  d.RunUntilIdle();
  EXPECT_EQ(d.output("b"), PrefixExpected(b));
  ExpectHealthy(d);
}

// A block-aligned prompt saves at its last two boundaries in the same step (12 for the same
// prompt again, 16 for a longer one), and both hit.
TEST(SchedulerPrefixTest, ABlockAlignedPromptSavesBothEndsInOneStep) {
  Driver d(PrefixConfig(), kPrefixVocab);
  const Request a = MakeRequest("a", Prompt(16, 100), 1);
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  StepPlan p = d.Step();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].token_ids.size(), 16u);
  EXPECT_THAT(SavePoints(p.sequences[0]), ElementsAre(8, 12, 16));
  EXPECT_EQ(d.output("a"), PrefixExpected(a));
  for (const auto& [id, prompt, hit] :
       {std::tuple{"again", Prompt(16, 100), 12}, std::tuple{"longer", Prompt(18, 100), 16}}) {
    const Request r = MakeRequest(id, prompt, 2);
    ASSERT_TRUE(d.scheduler().Add(r).ok());
    p = d.Step();
    ASSERT_EQ(p.sequences.size(), 1u);
    EXPECT_EQ(p.sequences[0].slot_init, SlotInit::kFromCheckpoint) << id;
    EXPECT_EQ(p.sequences[0].num_computed_tokens, hit) << id;
    d.RunUntilIdle();
    EXPECT_EQ(d.output(id), PrefixExpected(r)) << id;
  }
  ExpectHealthy(d);
}

// Checkpoints borrow live slots no sequence holds once their own slots are full, and an
// admission that finds no free slot takes one back, evicting the least recently used
// borrowed checkpoint: one own checkpoint slot and three live slots hold three checkpoints
// while the server is idle, and three admissions get their slots when it is busy.
TEST(SchedulerPrefixTest, IdleLiveSlotsHoldCheckpointsUntilAdmissionsNeedThem) {
  Driver d(FewSlotsConfig(1, 3), kPrefixVocab);
  for (int i = 0; i < 3; ++i) {  // one after another; each saves its prompt end, 8
    ASSERT_TRUE(d.scheduler().Add(MakeRequest(absl::StrCat("p", i), Prompt(9, 100 * i), 1)).ok());
    d.RunUntilIdle();
  }
  const kvcache::PrefixCache& cache = d.scheduler().prefix_cache();
  EXPECT_EQ(cache.num_checkpoints(), 3);
  EXPECT_EQ(cache.num_lent_slots(), 2);
  EXPECT_EQ(d.scheduler().stats().num_free_slots, 3);  // lent slots are free for sequences

  std::vector<Request> fresh;
  for (int i = 0; i < 3; ++i) {
    fresh.push_back(MakeRequest(absl::StrCat("f", i), Prompt(3, 700 + 10 * i), 2));
    ASSERT_TRUE(d.scheduler().Add(fresh.back()).ok());
  }
  EXPECT_EQ(d.Step().sequences.size(), 3u);  // the free slot, then the two lent ones
  EXPECT_EQ(cache.num_lent_slots(), 0);
  EXPECT_EQ(cache.num_checkpoints(), 1);
  EXPECT_EQ(d.scheduler().stats().num_checkpoints_evicted, 2);
  d.RunUntilIdle();
  for (const Request& r : fresh) EXPECT_EQ(d.output(r.request_id), PrefixExpected(r));

  // The own slot's checkpoint (p0's) survived: the same prompt starts from it.
  const Request again = MakeRequest("again", Prompt(9, 0), 1);
  ASSERT_TRUE(d.scheduler().Add(again).ok());
  ExpectHitAt(d.Step(), 8);
  d.RunUntilIdle();
  EXPECT_EQ(d.output("again"), PrefixExpected(again));
  ExpectHealthy(d);
}

// A request whose hit is in the only lent slot, with no slot free, waits for one rather than
// evicting its own hit; it then starts from it.
TEST(SchedulerPrefixTest, AnAdmissionNeverTakesBackTheSlotHoldingItsOwnHit) {
  Driver d(FewSlotsConfig(1, 2), kPrefixVocab);
  for (int i = 0; i < 2; ++i) {  // p0's checkpoint in the own slot, p1's in a lent one
    ASSERT_TRUE(d.scheduler().Add(MakeRequest(absl::StrCat("p", i), Prompt(9, 100 * i), 1)).ok());
    d.RunUntilIdle();
  }
  ASSERT_EQ(d.scheduler().prefix_cache().num_lent_slots(), 1);
  const Request busy = MakeRequest("busy", Prompt(3, 900), 3);
  ASSERT_TRUE(d.scheduler().Add(busy).ok());
  d.Step();  // busy holds the free slot
  const Request again = MakeRequest("again", Prompt(9, 100), 1);
  ASSERT_TRUE(d.scheduler().Add(again).ok());
  StepPlan p = d.Step();
  ASSERT_EQ(p.sequences.size(), 1u);  // busy decodes; `again` waits
  EXPECT_EQ(d.scheduler().num_waiting(), 1);
  while (d.scheduler().num_waiting() > 0) p = d.Step();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].slot_init, SlotInit::kFromCheckpoint);
  EXPECT_EQ(p.sequences[0].num_computed_tokens, 8);
  d.RunUntilIdle();
  EXPECT_EQ(d.output("again"), PrefixExpected(again));
  EXPECT_EQ(d.output("busy"), PrefixExpected(busy));
  ExpectHealthy(d);
}

// Without checkpoint slots to spare, saves that get none are skipped and the chunk still runs
// in one step.
TEST(SchedulerPrefixTest, SavesTakeTheCheckpointSlotsThereAre) {
  SchedulerConfig c = PrefixConfig();
  c.num_checkpoint_slots = 1;
  c.num_slots = c.max_num_seqs = 1;  // a holds it: no live slot to lend
  Driver d(c, kPrefixVocab);
  const Request a = MakeRequest("a", Prompt(16, 100), 1);
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  StepPlan p = d.Step();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].token_ids.size(), 16u);
  EXPECT_THAT(SavePoints(p.sequences[0]), ElementsAre(8));  // the only slot, pending
  EXPECT_EQ(d.output("a"), PrefixExpected(a));
  ExpectHealthy(d);
}

// One long prompt (30 tokens: stride boundaries every block, 4..28) through 4 checkpoint slots
// keeps only its latest 2 stride checkpoints in the LRU order and reserves at most 2 per
// chunk, so the checkpoint of an earlier conversation (x, 6 tokens: its prompt end at 4)
// survives and its next turn hits it. Without the limit the long prompt evicts it.
TEST(SchedulerPrefixTest, ALongPromptKeepsFewStrideCheckpointsAndSparesOtherConversations) {
  for (const int keep : {2, 0}) {
    SchedulerConfig c = PrefixConfig();
    c.checkpoint_every_n_blocks = 1;
    c.max_model_len = 40;
    c.stride_checkpoints_per_sequence = keep;
    c.num_slots = c.max_num_seqs = 1;  // the running one holds it: no live slot to lend
    Driver d(c, kPrefixVocab);
    const Request x = MakeRequest("x", Prompt(6, 100), 1);
    ASSERT_TRUE(d.scheduler().Add(x).ok());
    d.RunUntilIdle();
    ASSERT_EQ(d.scheduler().prefix_cache().num_checkpoints(), 1);

    const Request longer = MakeRequest("long", Prompt(30, 500), 1);
    ASSERT_TRUE(d.scheduler().Add(longer).ok());
    StepPlan p = d.Step();
    ASSERT_EQ(p.sequences.size(), 1u);
    const Saves want = keep == 2 ? Saves{12, 16} : Saves{4, 8, 12, 16};
    EXPECT_EQ(SavePoints(p.sequences[0]), want) << keep;
    d.RunUntilIdle();
    EXPECT_EQ(d.output("long"), PrefixExpected(longer));

    const Request next = MakeRequest("x2", Concat(Prompt(6, 100), {7, 8, 9}), 2);
    ASSERT_TRUE(d.scheduler().Add(next).ok());
    p = d.Step();
    ASSERT_EQ(p.sequences.size(), 1u);
    EXPECT_EQ(p.sequences[0].num_computed_tokens, keep == 2 ? 4 : 0) << keep;
    // Both runs evict (4 slots for 8 boundaries); the limit only chooses which.
    EXPECT_GT(d.scheduler().stats().num_checkpoints_evicted, 0) << keep;
    d.RunUntilIdle();
    EXPECT_EQ(d.output("x2"), PrefixExpected(next));
    ExpectHealthy(d);
  }
}

// Images: each step's plan carries the images overlapping its chunk, and a prefix hit over an
// image's positions needs the same image (its content key is in the block hashes), while the
// blocks before the image are shared with any request.
engine::MediaEmbedding Image(int64_t position, int64_t rows, uint64_t key) {
  engine::MediaEmbedding m;
  m.position = position;
  m.num_rows = rows;
  m.content_key = key;
  m.rows = std::make_shared<const std::vector<float>>(static_cast<size_t>(rows), 0.5f);
  return m;
}

TEST(SchedulerPrefixTest, PlansCarryTheImagesOfTheirChunkAndHitsNeedTheSameImage) {
  Driver d(PrefixConfig(), kPrefixVocab);
  constexpr int32_t kPad = 5;
  // Image at [10, 20) of a 24-token prompt: the first chunk [0, 16) and the second [16, 24).
  std::vector<int32_t> prompt = Prompt(24, 100);
  std::fill(prompt.begin() + 10, prompt.begin() + 20, kPad);
  Request a = MakeRequest("a", prompt, 1);
  a.media = {Image(10, 10, 0xabc)};
  ASSERT_TRUE(d.scheduler().Add(a).ok());
  StepPlan first = d.Step();
  ASSERT_EQ(first.sequences.size(), 1u);
  EXPECT_THAT(Only(first), IsChunk(0, 16, Saves{8, 16}, false));
  ASSERT_EQ(first.sequences[0].media.size(), 1u);
  EXPECT_EQ(first.sequences[0].media[0].position, 10);
  StepPlan second = d.Step();
  EXPECT_EQ(second.sequences.at(0).num_computed_tokens, 16);
  ASSERT_EQ(second.sequences[0].media.size(), 1u);  // rows 16..19 are in this chunk
  d.RunUntilIdle();
  EXPECT_TRUE(d.executor().errors().empty());

  // The same tokens with another image: only the blocks before the image (tokens [0, 8)) hit.
  Request b = MakeRequest("b", prompt, 1);
  b.media = {Image(10, 10, 0xdef)};
  ASSERT_TRUE(d.scheduler().Add(b).ok());
  StepPlan pb = d.Step();
  EXPECT_EQ(pb.sequences.at(0).num_computed_tokens, 8);
  d.RunUntilIdle();
  EXPECT_EQ(d.last_events().at(0).num_cached_tokens, 8);

  // The same image again: a hit through the whole image (to a's prompt-end checkpoint at 20).
  Request c = MakeRequest("c", prompt, 1);
  c.media = {Image(10, 10, 0xabc)};
  ASSERT_TRUE(d.scheduler().Add(c).ok());
  StepPlan pc = d.Step();
  EXPECT_EQ(pc.sequences.at(0).num_computed_tokens, 20);
  EXPECT_TRUE(pc.sequences[0].media.empty());  // no image row is left to compute
  d.RunUntilIdle();
  ExpectHealthy(d);
}

}  // namespace
}  // namespace strata::scheduler
