// BuildStepLayout: a StepPlan flattened into the CUDA kernels' index arrays. Expected values are
// written out by hand from the plan below (not computed by the code under test).
#include "engine/cuda/step_layout.h"

#include <vector>

#include <gtest/gtest.h>

namespace strata::engine::cuda {
namespace {

ScheduledSequence Seq(SequenceId id, std::vector<int32_t> tokens, int64_t computed,
                      std::vector<int32_t> blocks, int32_t slot, bool sample) {
  ScheduledSequence s;
  s.seq_id = id;
  s.token_ids = std::move(tokens);
  s.num_computed_tokens = computed;
  s.block_table = std::move(blocks);
  s.slot = slot;
  s.sample = sample;
  return s;
}

kvcache::CacheLayout Layout(int kda_layers) {
  kvcache::CacheLayout l;
  l.num_mla_layers = 1;
  l.block_size = 64;
  l.num_blocks = 16;
  l.num_kda_layers = kda_layers;
  l.kda_state_bytes_per_layer = 4;
  l.kda_conv_bytes_per_layer = 4;
  l.num_slots = 8;
  l.num_checkpoints = 2;
  return l;
}

std::vector<int32_t> Slice(const StepLayout& s, int64_t offset, int64_t count) {
  return {s.ints.begin() + offset, s.ints.begin() + offset + count};
}

// Plan order: A prefill (5 tokens from 0), B decode at 70, C nothing, D decode at 3, E prefill
// (3 tokens from 64, crossing into its second block).
StepPlan MixedPlan() {
  StepPlan plan;
  plan.sequences.push_back(Seq(10, {1, 2, 3, 4, 5}, 0, {7}, 3, true));
  plan.sequences.push_back(Seq(11, {6}, 70, {4, 9}, 0, true));
  plan.sequences.push_back(Seq(12, {}, 8, {2}, 1, true));
  plan.sequences.push_back(Seq(13, {8}, 3, {5}, 6, false));
  plan.sequences.push_back(Seq(14, {20, 21, 22}, 64, {11, 12}, 2, false));
  return plan;
}

TEST(StepLayoutTest, DecodeSequencesComeFirstAndEmptyOnesAreLeftOut) {
  StepLayout s;
  BuildStepLayout(MixedPlan(), Layout(1), &s);
  EXPECT_EQ(s.plan_index, (std::vector<int32_t>{1, 3, 0, 4}));
  EXPECT_EQ(s.num_sequences, 4);
  EXPECT_EQ(s.num_decode, 2);
  EXPECT_EQ(s.num_prefill(), 2);
  EXPECT_EQ(s.num_rows, 10);
  EXPECT_EQ(s.num_drafting, 0);
  EXPECT_EQ(s.first_draft_row, 10);
  EXPECT_EQ(s.row_offset, (std::vector<int64_t>{0, 1, 2, 7, 10}));
  EXPECT_EQ(Slice(s, s.token_ids, 10), (std::vector<int32_t>{6, 8, 1, 2, 3, 4, 5, 20, 21, 22}));
  EXPECT_EQ(s.ints[s.live_rows], 10);
}

TEST(StepLayoutTest, TokensMapToTheirBlockRows) {
  StepLayout s;
  BuildStepLayout(MixedPlan(), Layout(1), &s);
  // B pos 70 → block 9 row 6; D pos 3 → block 5 row 3; A pos 0..4 → block 7;
  // E pos 64..66 → block 12 rows 0..2.
  EXPECT_EQ(Slice(s, s.slot_mapping, 10),
            (std::vector<int32_t>{9 * 64 + 6, 5 * 64 + 3, 7 * 64, 7 * 64 + 1, 7 * 64 + 2,
                                  7 * 64 + 3, 7 * 64 + 4, 12 * 64, 12 * 64 + 1, 12 * 64 + 2}));
  EXPECT_EQ(s.max_blocks_per_seq, 2);
  EXPECT_EQ(Slice(s, s.block_tables, 8), (std::vector<int32_t>{4, 9, 5, 0, 7, 0, 11, 12}));
  EXPECT_EQ(Slice(s, s.seq_lens, 4), (std::vector<int32_t>{71, 4, 5, 67}));
  EXPECT_EQ(s.max_decode_context, 71);
  EXPECT_EQ(s.max_prefill_context, 67);
}

TEST(StepLayoutTest, PrefillRowsKnowTheirSequenceAndCausalLength) {
  StepLayout s;
  BuildStepLayout(MixedPlan(), Layout(1), &s);
  EXPECT_EQ(Slice(s, s.prefill_cu, 3), (std::vector<int32_t>{0, 5, 8}));
  EXPECT_EQ(Slice(s, s.prefill_cu_k, 3), (std::vector<int32_t>{0, 5, 72}));  // contexts 5, 67
  EXPECT_EQ(s.max_prefill_new, 5);
  EXPECT_EQ(s.total_prefill_context, 72);
  EXPECT_EQ(Slice(s, s.query_seq, 8), (std::vector<int32_t>{2, 2, 2, 2, 2, 3, 3, 3}));
  EXPECT_EQ(Slice(s, s.query_len, 8), (std::vector<int32_t>{1, 2, 3, 4, 5, 65, 66, 67}));
}

TEST(StepLayoutTest, SlotsAndLogitRowsFollowPlanOrder) {
  StepLayout s;
  BuildStepLayout(MixedPlan(), Layout(1), &s);
  EXPECT_EQ(Slice(s, s.kda_slots, 4), (std::vector<int32_t>{0, 6, 3, 2}));
  // Sampling sequences in plan order: A (last row 6), B (row 0); C has no tokens.
  EXPECT_EQ(s.sampled_plan_index, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(s.sampled_logit_row, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(s.num_logit_rows, 2);
  EXPECT_EQ(Slice(s, s.logit_rows, 2), (std::vector<int32_t>{6, 0}));
}

TEST(StepLayoutTest, DraftingSequencesRunLastAndSampleTheRowBeforeEachDraftAndTheLast) {
  // A (plan 0) carries drafts 4, 5: it runs after the other prefill sequence E (its KDA rows
  // are kept for a replay: a contiguous tail of the step), so its rows are 5..9 and the rows of
  // its tokens 3, 4 and 5 are sampled (execution rows 7, 8, 9), then B's.
  StepPlan plan = MixedPlan();
  plan.sequences[0].num_draft_tokens = 2;
  StepLayout s;
  BuildStepLayout(plan, Layout(1), &s);
  EXPECT_EQ(s.plan_index, (std::vector<int32_t>{1, 3, 4, 0}));
  EXPECT_EQ(s.num_drafting, 1);
  EXPECT_EQ(s.first_draft_row, 5);
  EXPECT_EQ(s.row_offset, (std::vector<int64_t>{0, 1, 2, 5, 10}));
  EXPECT_EQ(Slice(s, s.prefill_cu, 3), (std::vector<int32_t>{0, 3, 8}));
  EXPECT_EQ(Slice(s, s.kda_slots, 4), (std::vector<int32_t>{0, 6, 2, 3}));
  EXPECT_EQ(s.sampled_plan_index, (std::vector<int32_t>{0, 0, 0, 1}));
  EXPECT_EQ(s.sampled_rows_back, (std::vector<int32_t>{2, 1, 0, 0}));
  EXPECT_EQ(s.sampled_logit_row, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(s.num_logit_rows, 4);
  EXPECT_EQ(Slice(s, s.logit_rows, 4), (std::vector<int32_t>{7, 8, 9, 0}));
}

// Sequences saving KDA checkpoints inside the step run after the plain prefill ones, and
// their KDA rows are cut into pieces at the saves: P0 (6 tokens) saves checkpoint 1 after 2
// tokens and checkpoint 0 at its end (not a piece: copied after the step); P3 (5 tokens)
// saves checkpoint 0 after 1 and checkpoint 1 after 4. Checkpoint c is state row 8 + c.
TEST(StepLayoutTest, SavingSequencesRunAfterThePlainOnesInPiecesSplitAtTheirSaves) {
  StepPlan plan;
  plan.sequences.push_back(Seq(30, {1, 2, 3, 4, 5, 6}, 0, {7}, 3, true));
  plan.sequences[0].save_checkpoints = {{1, 2}, {0, 6}};
  plan.sequences.push_back(Seq(31, {7}, 9, {4}, 0, true));
  plan.sequences.push_back(Seq(32, {8, 9, 10}, 0, {5}, 2, true));
  plan.sequences.push_back(Seq(33, {11, 12, 13, 14, 15}, 0, {6}, 4, true));
  plan.sequences[3].save_checkpoints = {{0, 1}, {1, 4}};
  StepLayout s;
  BuildStepLayout(plan, Layout(1), &s);
  EXPECT_EQ(s.plan_index, (std::vector<int32_t>{1, 2, 0, 3}));
  EXPECT_EQ(s.num_decode, 1);
  EXPECT_EQ(s.num_saving, 2);
  EXPECT_EQ(s.num_plain_prefill(), 1);
  EXPECT_EQ(Slice(s, s.prefill_cu, 4), (std::vector<int32_t>{0, 3, 9, 14}));
  EXPECT_EQ(Slice(s, s.kda_slots, 4), (std::vector<int32_t>{0, 2, 3, 4}));
  EXPECT_EQ(s.kda_piece_seq, (std::vector<int32_t>{2, 2, 3, 3, 3}));
  EXPECT_EQ(s.kda_piece_save_row, (std::vector<int32_t>{9, -1, 8, 9, -1}));
  EXPECT_EQ(Slice(s, s.kda_pieces_cu, 10),
            (std::vector<int32_t>{3, 5, 5, 9, 9, 10, 10, 13, 13, 14}));
  // A save only at the end is no piece, and the sequence is a plain one.
  plan.sequences[0].save_checkpoints = {{0, 6}};
  plan.sequences[3].save_checkpoints.clear();
  BuildStepLayout(plan, Layout(1), &s);
  EXPECT_EQ(s.plan_index, (std::vector<int32_t>{1, 0, 2, 3}));
  EXPECT_EQ(s.num_saving, 0);
  EXPECT_TRUE(s.kda_piece_seq.empty());
}

TEST(StepLayoutTest, ScoredRowsFollowTheSampledRows) {
  // A (plan 0) scores its first 4 tokens and samples its last (rows 2..6); D (plan 3, a decode
  // row at execution row 1) scores its one token without sampling.
  StepPlan plan = MixedPlan();
  plan.sequences[0].score_targets = {2, 3, 4, 5};
  plan.sequences[3].score_targets = {9};
  StepLayout s;
  BuildStepLayout(plan, Layout(1), &s);
  EXPECT_EQ(s.num_logit_rows, 2 + 4 + 1);
  EXPECT_EQ(s.num_scored_rows, 5);
  EXPECT_EQ(s.num_sampled_rows(), 2);
  EXPECT_EQ(s.scored_plan_index, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(s.scored_logit_row, (std::vector<int32_t>{2, 6}));
  EXPECT_EQ(Slice(s, s.logit_rows, 7), (std::vector<int32_t>{6, 0, 2, 3, 4, 5, 1}));
}

TEST(StepLayoutTest, WithoutKdaLayersSlotsAreMinusOne) {
  StepLayout s;
  StepPlan plan = MixedPlan();
  for (ScheduledSequence& seq : plan.sequences) seq.slot = -1;
  BuildStepLayout(plan, Layout(0), &s);
  EXPECT_EQ(Slice(s, s.kda_slots, 4), (std::vector<int32_t>{-1, -1, -1, -1}));
}

TEST(StepLayoutTest, ReusedLayoutForgetsThePreviousStep) {
  StepLayout s;
  BuildStepLayout(MixedPlan(), Layout(1), &s);
  StepPlan small;
  small.sequences.push_back(Seq(20, {9}, 0, {1}, 4, true));
  BuildStepLayout(small, Layout(1), &s);
  EXPECT_EQ(s.num_sequences, 1);
  EXPECT_EQ(s.num_decode, 1);
  EXPECT_EQ(s.num_rows, 1);
  EXPECT_EQ(s.max_prefill_context, 0);
  EXPECT_EQ(s.ints.size(), size_t{1 + 1 + 1 + 1 + 1 + 1 + 1 + 0 + 0 + 1 + 1});
  EXPECT_EQ(s.ints[s.live_rows], 1);
  EXPECT_EQ(Slice(s, s.slot_mapping, 1), (std::vector<int32_t>{64}));
  EXPECT_EQ(Slice(s, s.logit_rows, 1), (std::vector<int32_t>{0}));
}

// Decode plan: E (plan 0, slot 2, at 64 on blocks {11, 12}), F (plan 1, not sampled, at 3 on
// block {5}), G (plan 2, slot 4, at 130 on blocks {1, 2, 3}).
StepPlan DecodePlan() {
  StepPlan plan;
  plan.sequences.push_back(Seq(20, {7}, 64, {11, 12}, 2, true));
  plan.sequences.push_back(Seq(21, {8}, 3, {5}, 5, false));
  plan.sequences.push_back(Seq(22, {9}, 130, {1, 2, 3}, 4, true));
  return plan;
}

TEST(StepLayoutTest, PaddedDecodeStepHasTheBucketsShapes) {
  StepLayout s;
  BuildStepLayout(DecodePlan(), Layout(1), &s);
  EXPECT_EQ(s.max_blocks_per_seq, 3);
  PadDecodeStep(4, 8, 64, &s);
  EXPECT_EQ(s.num_sequences, 4);
  EXPECT_EQ(s.num_decode, 4);
  EXPECT_EQ(s.num_rows, 4);
  EXPECT_EQ(s.max_blocks_per_seq, 8);
  EXPECT_EQ(s.max_decode_context, 8 * 64);
  EXPECT_EQ(s.num_logit_rows, 4);
  EXPECT_EQ(Slice(s, s.token_ids, 4), (std::vector<int32_t>{7, 8, 9, 0}));
  EXPECT_EQ(Slice(s, s.slot_mapping, 4),
            (std::vector<int32_t>{12 * 64, 5 * 64 + 3, 3 * 64 + 2, -1}));
  EXPECT_EQ(Slice(s, s.kda_slots, 4), (std::vector<int32_t>{2, 5, 4, -1}));
  EXPECT_EQ(Slice(s, s.seq_lens, 4), (std::vector<int32_t>{65, 4, 131, 1}));
  EXPECT_EQ(Slice(s, s.block_tables, 32), (std::vector<int32_t>{11, 12, 0, 0, 0, 0, 0, 0,  //
                                                                5,  0,  0, 0, 0, 0, 0, 0,  //
                                                                1,  2,  3, 0, 0, 0, 0, 0,  //
                                                                0,  0,  0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(Slice(s, s.logit_rows, 4), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(s.ints[s.live_rows], 3);
  EXPECT_EQ(Slice(s, s.prefill_cu, 1), (std::vector<int32_t>{0}));
  // E and G sample; their logits are rows 0 and 2 of the padded step.
  EXPECT_EQ(s.sampled_plan_index, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(s.sampled_logit_row, (std::vector<int32_t>{0, 2}));
}

TEST(StepLayoutTest, PaddedStepsOfOneBucketShareOffsets) {
  StepLayout a, b;
  BuildStepLayout(DecodePlan(), Layout(1), &a);
  PadDecodeStep(4, 8, 64, &a);
  StepPlan one;
  one.sequences.push_back(Seq(30, {1}, 0, {6}, 0, true));
  BuildStepLayout(one, Layout(1), &b);
  PadDecodeStep(4, 8, 64, &b);
  EXPECT_EQ(a.ints.size(), b.ints.size());
  for (int64_t StepLayout::*offset :
       {&StepLayout::token_ids, &StepLayout::slot_mapping, &StepLayout::block_tables,
        &StepLayout::kda_slots, &StepLayout::seq_lens, &StepLayout::logit_rows}) {
    EXPECT_EQ(a.*offset, b.*offset);
  }
  EXPECT_EQ(b.sampled_logit_row, (std::vector<int32_t>{0}));
}

TEST(StepLayoutDeathTest, PaddingAPrefillStepIsAnInvariantViolation) {
  StepLayout s;
  BuildStepLayout(MixedPlan(), Layout(1), &s);
  EXPECT_DEATH(PadDecodeStep(8, 4, 64, &s), "only decode steps");
}

TEST(StepLayoutDeathTest, ShortBlockTableIsAnInvariantViolation) {
  StepPlan plan;
  plan.sequences.push_back(Seq(1, {1, 2}, 63, {3}, 0, true));  // needs 2 blocks
  StepLayout s;
  EXPECT_DEATH(BuildStepLayout(plan, Layout(1), &s), "too short");
}

// Decode context parallelism over C = 2 ranks: rank d holds positions ≡ d (mod 2), position p at
// local row p / 2. X decodes at position 130 (block table {4, 9} in local rows), Y prefills
// positions 3..6 (block table {7}).
TEST(StepLayoutTest, ContextParallelRankHoldsEveryOtherPosition) {
  StepPlan plan;
  plan.sequences.push_back(Seq(20, {5}, 130, {4, 9}, 0, true));
  plan.sequences.push_back(Seq(21, {1, 2, 3, 4}, 3, {7}, 1, true));
  StepLayout s;
  BuildStepLayout(plan, Layout(1), &s, ContextParallelShard{1, 2});
  EXPECT_EQ(s.cp_size, 2);
  // Rank 1: position 130 is rank 0's; Y's 3 and 5 are local rows 1 and 2 of block 7.
  EXPECT_EQ(Slice(s, s.slot_mapping, 5),
            (std::vector<int32_t>{-1, 7 * 64 + 1, -1, 7 * 64 + 2, -1}));
  EXPECT_EQ(Slice(s, s.cp_query_seq, 5), (std::vector<int32_t>{0, 1, 1, 1, 1}));
  // Rows of positions ≤ p on rank 1: 1, 3, …, 129 for X (65); {1}, {1, 3}, … for Y.
  EXPECT_EQ(Slice(s, s.cp_query_len, 5), (std::vector<int32_t>{65, 2, 2, 3, 3}));
  EXPECT_EQ(s.max_cp_query_len, 65);
  EXPECT_EQ(s.max_blocks_per_seq, 2);
  EXPECT_EQ(Slice(s, s.block_tables, 4), (std::vector<int32_t>{4, 9, 7, 0}));
  EXPECT_EQ(Slice(s, s.seq_lens, 2), (std::vector<int32_t>{131, 7}));  // whole contexts

  BuildStepLayout(plan, Layout(1), &s, ContextParallelShard{0, 2});
  // Rank 0: 130 is local row 65 (block 9, row 1); Y's 4 and 6 are local rows 2 and 3.
  EXPECT_EQ(Slice(s, s.slot_mapping, 5),
            (std::vector<int32_t>{9 * 64 + 1, -1, 7 * 64 + 2, -1, 7 * 64 + 3}));
  EXPECT_EQ(Slice(s, s.cp_query_len, 5), (std::vector<int32_t>{66, 2, 3, 3, 4}));
  EXPECT_EQ(s.max_cp_query_len, 66);

  // A decode-only step under context parallelism padded for a graph: X keeps its share, the
  // padding rows are one-token sequences whose position 0 only rank 0 holds; the partial
  // attention's grid is sized for the whole table.
  StepPlan decode_only;
  decode_only.sequences.push_back(plan.sequences[0]);
  for (int rank : {0, 1}) {
    BuildStepLayout(decode_only, Layout(1), &s, ContextParallelShard{rank, 2});
    PadDecodeStep(4, 8, 64, &s);
    EXPECT_EQ(s.num_rows, 4);
    EXPECT_EQ(s.max_cp_query_len, 8 * 64);
    EXPECT_EQ(Slice(s, s.cp_query_seq, 4), (std::vector<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(Slice(s, s.cp_query_len, 4), rank == 0 ? (std::vector<int32_t>{66, 1, 1, 1})
                                                     : (std::vector<int32_t>{65, 0, 0, 0}));
    EXPECT_EQ(Slice(s, s.slot_mapping, 4), rank == 0
                                               ? (std::vector<int32_t>{9 * 64 + 1, -1, -1, -1})
                                               : (std::vector<int32_t>{-1, -1, -1, -1}));
    EXPECT_EQ(Slice(s, s.seq_lens, 4), (std::vector<int32_t>{131, 1, 1, 1}));
  }

  plan.sequences.erase(plan.sequences.begin());  // X's 131 positions need 3 blocks on one rank
  BuildStepLayout(plan, Layout(1), &s);          // no context parallelism: no cp arrays
  EXPECT_EQ(s.cp_size, 1);
  EXPECT_EQ(s.cp_query_len, s.cp_query_seq);
  EXPECT_EQ(static_cast<int64_t>(s.ints.size()), s.cp_query_seq);
  EXPECT_EQ(Slice(s, s.slot_mapping, 4),
            (std::vector<int32_t>{7 * 64 + 3, 7 * 64 + 4, 7 * 64 + 5, 7 * 64 + 6}));
}

}  // namespace
}  // namespace strata::engine::cuda
