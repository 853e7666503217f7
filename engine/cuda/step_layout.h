// The host side of one CUDA step: a StepPlan flattened into the index arrays the device kernels
// read, packed into one int32 buffer so a step costs one host→device copy.
//
// Execution order: every one-token (decode) sequence first, in plan order, then the multi-token
// (prefill chunk) sequences, in plan order — those saving KDA checkpoints inside the step
// after the others (num_saving of them: their KDA kernels run piece by piece, split at the
// saves), those verifying drafts last (num_drafting of them, rows from first_draft_row on:
// their KDA rows are kept for a replay, engine/kda_drafts.h); sequences with no new tokens are
// left out. So the decode rows are rows [0, num_decode) of
// every activation, and the decode kernels (KDA fused step, MLA paged decode) run over a prefix
// of the batch while the prefill kernels run over the rest. Row r of the step is token `r` in
// that order.
//
// Arrays (int32, element offsets into `ints`; S = sequences, N = rows, D = num_decode,
// P = S − D prefill sequences, R = logits rows):
//   token_ids     [N]       the new tokens
//   slot_mapping  [N]       latent cache row of each token (block · block_size + pos % block_size;
//                           −1: a padding row, nothing written)
//   block_tables  [S, W]    MLA pages of each sequence (W = max_blocks_per_seq), padded with
//                           block 0 (never read: kernels stop at the sequence length)
//   kda_slots     [S]       KDA state row of each sequence (−1: none, or a padding row)
//   seq_lens      [S]       context after the step (computed + new): the MLA decode lengths
//   prefill_cu    [P + 1]   prefill sequence p owns rows D + prefill_cu[p] .. D + prefill_cu[p+1]
//   prefill_cu_k  [P + 1]   prefix sums of the prefill sequences' seq_lens (their rows of a
//                           dense context buffer: the MHA-form MLA prefill)
//   query_seq     [N − D]   execution sequence of each prefill row (its block-table row)
//   query_len     [N − D]   causal length of each prefill row (its position + 1)
//   logit_rows    [R]       the rows whose logits are computed
//   kda_pieces_cu [2·K]     KDA piece k of the saving sequences: prefill rows (relative, as
//                           prefill_cu) kda_pieces_cu[2k] .. kda_pieces_cu[2k + 1]
//   live_rows     [1]       rows that are real tokens (N, or fewer in a padded step: the MoE
//                           router ignores the padding rows)
// With decode context parallelism (a ContextParallelShard of C ranks, engine/tensor_parallel.h)
// this rank holds positions p ≡ rank (mod C) of every sequence, position p at its local row
// p / C: the block tables and slot_mapping are in local rows (slot −1 for another rank's
// position), and two more arrays give every row's query its share of the context:
//   cp_query_seq  [N]       execution sequence of each row (its block-table row)
//   cp_query_len  [N]       local rows of positions ≤ the row's own (0: this rank holds none)
// Host side: sampled_plan_index[i] is the plan sequence of the i-th sampled row, whose logits
// are row sampled_logit_row[i] of the step's logits: one per sampling sequence, or 1 + k for a
// sequence with k drafts (consecutive: the rows before each draft, then the last row;
// sampled_rows_back[i] counts the rows from it to the sequence's last). After the sampled rows
// come the scored rows
// (ScheduledSequence::score_targets): plan sequence scored_plan_index[j]'s rows for its targets
// start at logits row scored_logit_row[j], one per target, in order.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/step.h"
#include "engine/tensor_parallel.h"
#include "kvcache/cache_layout.h"

namespace strata::engine::cuda {

struct StepLayout {
  int32_t num_sequences = 0;
  int32_t num_decode = 0;
  int32_t num_saving = 0;       // multi-token, saving KDA checkpoints inside the step
  int32_t num_drafting = 0;     // the last sequences, multi-token, verifying drafts
  int64_t first_draft_row = 0;  // their first row (num_rows when none)
  int64_t num_rows = 0;
  int32_t max_blocks_per_seq = 1;
  int64_t max_decode_context = 0;     // max seq_lens over the decode sequences
  int64_t max_prefill_context = 0;    // max seq_lens over the prefill sequences
  int64_t max_prefill_new = 0;        // most new tokens of one prefill sequence
  int64_t total_prefill_context = 0;  // sum of seq_lens over the prefill sequences
  int32_t cp_size = 1;                // decode context parallelism: C (1: off)
  int32_t cp_rank = 0;                // this rank's place among the C
  int64_t max_cp_query_len = 0;       // max of cp_query_len

  std::vector<int32_t> plan_index;          // [S] plan.sequences index of each execution sequence
  std::vector<int32_t> sampled_plan_index;  // plan.sequences index of each sampled token
  std::vector<int32_t> sampled_logit_row;   // its row among the R logits rows
  std::vector<int32_t> sampled_rows_back;   // its distance from the sequence's last row
  std::vector<int32_t> scored_plan_index;   // plan.sequences index of each scoring sequence
  std::vector<int32_t> scored_logit_row;    // the logits row of its first target
  std::vector<int64_t> row_offset;          // [S + 1] first row of each execution sequence
  // The saving sequences' KDA pieces, in order (K of them): piece k belongs to execution
  // sequence kda_piece_seq[k]; after it, when kda_piece_save_row[k] ≥ 0, the sequence's KDA
  // caches are copied to that state row (a checkpoint). Saves at the end of a sequence's new
  // tokens are not pieces: the executor copies them after the step.
  std::vector<int32_t> kda_piece_seq;
  std::vector<int32_t> kda_piece_save_row;
  std::vector<int32_t> kda_piece_rows;  // [2·K]: what kda_pieces_cu holds

  // Image rows replacing token embeddings (ScheduledSequence::media): rows [row, row + count)
  // of the step take rows [media_row, media_row + count) of media's rows (host memory the plan
  // keeps alive while the step runs).
  struct MediaRows {
    int64_t row = 0;
    int64_t count = 0;
    const MediaEmbedding* media = nullptr;
    int64_t media_row = 0;
  };
  std::vector<MediaRows> media_rows;

  std::vector<int32_t> ints;  // the packed arrays below, back to back
  int64_t token_ids = 0, slot_mapping = 0, block_tables = 0, kda_slots = 0, seq_lens = 0,
          prefill_cu = 0, prefill_cu_k = 0, query_seq = 0, query_len = 0, logit_rows = 0,
          live_rows = 0, kda_pieces_cu = 0, cp_query_seq = 0, cp_query_len = 0;

  int32_t num_prefill() const { return num_sequences - num_decode; }
  // Prefill sequences neither saving inside the step nor drafting (the first ones).
  int32_t num_plain_prefill() const { return num_prefill() - num_saving - num_drafting; }
  int64_t num_prefill_rows() const { return num_rows - num_decode; }
  int64_t num_logit_rows = 0;   // R
  int64_t num_scored_rows = 0;  // the last rows of R (none in a padded step)
  int64_t num_sampled_rows() const { return num_logit_rows - num_scored_rows; }
};

// Fills `out` from `plan` (vectors keep their capacity from step to step). CHECKs the plan's
// invariants the scheduler guarantees: block tables long enough, slots and blocks within the
// layout, a slot for every sequence when the model has KDA layers. `cp`: this rank's share of
// the latent cache under decode context parallelism (default: all of it).
void BuildStepLayout(const StepPlan& plan, const kvcache::CacheLayout& layout, StepLayout* out,
                     const ContextParallelShard& cp = {});

// Pads a decode-only layout (num_prefill() == 0) to `batch` ≥ num_decode rows and block tables
// `table_width` ≥ max_blocks_per_seq wide, so that every step of one (batch, width) bucket has
// the same shapes and offsets (a CUDA graph replays them). Padding rows: token 0, no cache row
// (slot_mapping −1, KDA slot −1), context 1 on block 0; every row's logits are computed
// (R = batch) and the sampled tokens keep their rows. max_decode_context becomes
// table_width · block_size (the split-K grid is sized for the whole table). Under decode context
// parallelism a padding row is a one-token sequence too (position 0: a local row on the
// context-parallel group's rank 0 only) and max_cp_query_len becomes table_width · block_size.
void PadDecodeStep(int32_t batch, int32_t table_width, int32_t block_size, StepLayout* step);

}  // namespace strata::engine::cuda
