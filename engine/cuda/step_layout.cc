#include "engine/cuda/step_layout.h"

#include <algorithm>

#include "core/check.h"

namespace strata::engine::cuda {
namespace {

// Whether a sequence saves a KDA checkpoint before its last new token.
bool SavesInside(const ScheduledSequence& seq) {
  for (const CheckpointSave& save : seq.save_checkpoints) {
    if (save.num_tokens < static_cast<int64_t>(seq.token_ids.size())) return true;
  }
  return false;
}

// Execution order: decode sequences, prefill sequences, prefill sequences saving checkpoints
// inside the step, prefill sequences verifying drafts, each in plan order.
void OrderSequences(const StepPlan& plan, StepLayout* out) {
  enum Kind { kDecode, kPrefill, kSaving, kDrafting };
  out->plan_index.clear();
  for (int pass = kDecode; pass <= kDrafting; ++pass) {
    const size_t before = out->plan_index.size();
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      const ScheduledSequence& seq = plan.sequences[i];
      const size_t n = seq.token_ids.size();
      const int kind = n == 1                     ? kDecode
                       : seq.num_draft_tokens > 0 ? kDrafting
                       : SavesInside(seq)         ? kSaving
                                                  : kPrefill;
      if (n == 0 || kind != pass) continue;
      CHECK(seq.num_draft_tokens == 0 || seq.save_checkpoints.empty())
          << "sequence " << seq.seq_id << " saves checkpoints and verifies drafts";
      out->plan_index.push_back(static_cast<int32_t>(i));
    }
    const auto added = static_cast<int32_t>(out->plan_index.size() - before);
    if (pass == kDecode) out->num_decode = added;
    if (pass == kSaving) out->num_saving = added;
    if (pass == kDrafting) out->num_drafting = added;
  }
  out->num_sequences = static_cast<int32_t>(out->plan_index.size());
}

// The saving sequences' KDA pieces (host lists; their row ranges go to kda_pieces_cu).
void SplitSavingSequences(const StepPlan& plan, const kvcache::CacheLayout& layout,
                          StepLayout* out) {
  out->kda_piece_seq.clear();
  out->kda_piece_save_row.clear();
  out->kda_piece_rows.clear();
  const int32_t first = out->num_decode + out->num_plain_prefill();
  for (int32_t s = first; s < first + out->num_saving; ++s) {
    const ScheduledSequence& seq = plan.sequences[static_cast<size_t>(out->plan_index[s])];
    const auto n = static_cast<int64_t>(seq.token_ids.size());
    const int64_t first_row = out->row_offset[static_cast<size_t>(s)] - out->num_decode;
    auto piece = [&](int64_t from_tokens, int64_t to_tokens, int32_t save_row) {
      out->kda_piece_seq.push_back(s);
      out->kda_piece_save_row.push_back(save_row);
      out->kda_piece_rows.push_back(static_cast<int32_t>(first_row + from_tokens));
      out->kda_piece_rows.push_back(static_cast<int32_t>(first_row + to_tokens));
    };
    int64_t previous = 0;
    for (const CheckpointSave& save : seq.save_checkpoints) {
      CHECK(save.checkpoint >= 0 && save.checkpoint < layout.num_checkpoint_ids() &&
            save.num_tokens > previous && save.num_tokens <= n)
          << "checkpoint " << save.checkpoint << " after " << save.num_tokens << " tokens of "
          << seq.seq_id;
      if (save.num_tokens == n) break;  // at the end: copied after the step
      piece(previous, save.num_tokens, layout.CheckpointRow(save.checkpoint));
      previous = save.num_tokens;
    }
    piece(previous, n, -1);  // the rest, to the sequence's last new token
  }
}

// Reserves the packed arrays' offsets once the sizes are known.
void AssignOffsets(StepLayout* out) {
  const int64_t s = out->num_sequences, n = out->num_rows, p = out->num_prefill();
  int64_t at = 0;
  auto take = [&at](int64_t count) {
    const int64_t offset = at;
    at += count;
    return offset;
  };
  out->token_ids = take(n);
  out->slot_mapping = take(n);
  out->block_tables = take(s * out->max_blocks_per_seq);
  out->kda_slots = take(s);
  out->seq_lens = take(s);
  out->prefill_cu = take(p + 1);
  out->prefill_cu_k = take(p + 1);
  out->query_seq = take(n - out->num_decode);
  out->query_len = take(n - out->num_decode);
  out->logit_rows = take(out->num_logit_rows);
  out->live_rows = take(1);
  out->kda_pieces_cu = take(2 * static_cast<int64_t>(out->kda_piece_seq.size()));
  out->cp_query_seq = take(out->cp_size > 1 ? n : 0);
  out->cp_query_len = take(out->cp_size > 1 ? n : 0);
  out->ints.assign(static_cast<size_t>(at), 0);
}

}  // namespace

void BuildStepLayout(const StepPlan& plan, const kvcache::CacheLayout& layout, StepLayout* out,
                     const ContextParallelShard& cp) {
  OrderSequences(plan, out);
  const int64_t bs = layout.block_size;
  out->cp_size = cp.size;
  out->cp_rank = cp.rank;
  out->max_cp_query_len = 0;
  out->media_rows.clear();
  out->row_offset.assign(1, 0);
  out->max_blocks_per_seq = 1;
  out->max_decode_context = out->max_prefill_context = 0;
  out->max_prefill_new = out->total_prefill_context = 0;
  for (int32_t s = 0; s < out->num_sequences; ++s) {
    const ScheduledSequence& seq = plan.sequences[static_cast<size_t>(out->plan_index[s])];
    const int64_t context = seq.num_computed_tokens + static_cast<int64_t>(seq.token_ids.size());
    // Under context parallelism a block holds every C-th position of C·block_size.
    CHECK_GE(static_cast<int64_t>(seq.block_table.size()) * bs, cp.MaxLocalRows(context))
        << "block table of sequence " << seq.seq_id << " is too short";
    CHECK_LE(context, int64_t{1} << 31) << "sequence " << seq.seq_id << " context";
    out->row_offset.push_back(out->row_offset.back() + static_cast<int64_t>(seq.token_ids.size()));
    out->max_cp_query_len = std::max(out->max_cp_query_len, cp.LocalRows(context));
    const int64_t blocks = (cp.LocalRows(context) + bs - 1) / bs;
    out->max_blocks_per_seq =
        std::max<int32_t>(out->max_blocks_per_seq, static_cast<int32_t>(blocks));
    int64_t& max_context = s < out->num_decode ? out->max_decode_context : out->max_prefill_context;
    max_context = std::max(max_context, context);
    if (s >= out->num_decode) {
      out->max_prefill_new =
          std::max(out->max_prefill_new, static_cast<int64_t>(seq.token_ids.size()));
      out->total_prefill_context += context;
    }
  }
  out->num_rows = out->row_offset.back();
  out->first_draft_row =
      out->row_offset[static_cast<size_t>(out->num_sequences - out->num_drafting)];
  CHECK_LT(out->total_prefill_context, int64_t{1} << 31) << "prefill contexts of one step";
  out->sampled_plan_index.clear();
  out->sampled_logit_row.clear();
  out->sampled_rows_back.clear();
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const ScheduledSequence& seq = plan.sequences[i];
    if (!seq.sample || seq.token_ids.empty()) continue;
    CHECK(seq.num_draft_tokens >= 0 &&
          seq.num_draft_tokens < static_cast<int64_t>(seq.token_ids.size()))
        << "drafts of sequence " << seq.seq_id;
    for (int32_t back = seq.num_draft_tokens; back >= 0; --back) {  // the row before each draft
      out->sampled_logit_row.push_back(static_cast<int32_t>(out->sampled_plan_index.size()));
      out->sampled_plan_index.push_back(static_cast<int32_t>(i));
      out->sampled_rows_back.push_back(back);
    }
  }
  out->num_logit_rows = static_cast<int64_t>(out->sampled_plan_index.size());
  SplitSavingSequences(plan, layout, out);
  out->scored_plan_index.clear();
  out->scored_logit_row.clear();
  out->num_scored_rows = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const ScheduledSequence& seq = plan.sequences[i];
    if (seq.score_targets.empty()) continue;
    CHECK_LE(seq.score_targets.size(), seq.token_ids.size()) << "sequence " << seq.seq_id;
    out->scored_plan_index.push_back(static_cast<int32_t>(i));
    out->scored_logit_row.push_back(static_cast<int32_t>(out->num_logit_rows));
    out->num_logit_rows += static_cast<int64_t>(seq.score_targets.size());
    out->num_scored_rows += static_cast<int64_t>(seq.score_targets.size());
  }
  AssignOffsets(out);

  int32_t* ints = out->ints.data();
  std::vector<int64_t> first_row(plan.sequences.size(), -1), last_row(plan.sequences.size(), -1);
  int64_t prefill_row = 0;
  ints[out->prefill_cu] = 0;
  ints[out->prefill_cu_k] = 0;
  for (int32_t s = 0; s < out->num_sequences; ++s) {
    const ScheduledSequence& seq = plan.sequences[static_cast<size_t>(out->plan_index[s])];
    const int64_t first = out->row_offset[s], count = static_cast<int64_t>(seq.token_ids.size());
    for (int64_t i = 0; i < count; ++i) {
      const int64_t row = first + i, pos = seq.num_computed_tokens + i;
      ints[out->token_ids + row] = seq.token_ids[static_cast<size_t>(i)];
      ints[out->slot_mapping + row] = -1;  // another rank's position
      if (cp.Owns(pos)) {
        const int64_t local = pos / cp.size;
        const int32_t block = seq.block_table[static_cast<size_t>(local / bs)];
        CHECK(block >= 0 && block < layout.num_blocks) << "block " << block << " of " << seq.seq_id;
        ints[out->slot_mapping + row] = static_cast<int32_t>(block * bs + local % bs);
      }
      if (cp.enabled()) {
        ints[out->cp_query_seq + row] = s;
        ints[out->cp_query_len + row] = static_cast<int32_t>(cp.LocalRows(pos + 1));
      }
      if (s >= out->num_decode) {
        ints[out->query_seq + prefill_row] = s;
        ints[out->query_len + prefill_row] = static_cast<int32_t>(pos + 1);
        ++prefill_row;
      }
    }
    for (const MediaEmbedding& m : seq.media) {
      const int64_t begin = std::max(seq.num_computed_tokens, m.position);
      const int64_t end = std::min(seq.num_computed_tokens + count, m.end());
      if (begin >= end) continue;
      out->media_rows.push_back(
          {first + begin - seq.num_computed_tokens, end - begin, &m, begin - m.position});
    }
    first_row[static_cast<size_t>(out->plan_index[s])] = first;
    last_row[static_cast<size_t>(out->plan_index[s])] = first + count - 1;
    const int64_t context = seq.num_computed_tokens + count;
    const int64_t blocks = (cp.LocalRows(context) + bs - 1) / bs;
    for (int64_t b = 0; b < blocks; ++b) {
      ints[out->block_tables + s * out->max_blocks_per_seq + b] =
          seq.block_table[static_cast<size_t>(b)];
    }
    if (layout.num_kda_layers > 0) {
      CHECK(seq.slot >= 0 && seq.slot < layout.num_slots)
          << "sequence " << seq.seq_id << " has slot " << seq.slot;
      ints[out->kda_slots + s] = layout.SlotRow(seq.slot);
    } else {
      ints[out->kda_slots + s] = -1;
    }
    ints[out->seq_lens + s] = static_cast<int32_t>(context);
    if (s >= out->num_decode) {
      const int64_t p = s - out->num_decode;
      ints[out->prefill_cu + p + 1] = static_cast<int32_t>(prefill_row);
      ints[out->prefill_cu_k + p + 1] = static_cast<int32_t>(ints[out->prefill_cu_k + p] + context);
    }
  }
  ints[out->live_rows] = static_cast<int32_t>(out->num_rows);
  std::copy(out->kda_piece_rows.begin(), out->kda_piece_rows.end(), ints + out->kda_pieces_cu);
  for (int64_t r = 0; r < out->num_sampled_rows(); ++r) {
    ints[out->logit_rows + r] =
        static_cast<int32_t>(last_row[static_cast<size_t>(out->sampled_plan_index[r])] -
                             out->sampled_rows_back[static_cast<size_t>(r)]);
  }
  for (size_t j = 0; j < out->scored_plan_index.size(); ++j) {
    const size_t i = static_cast<size_t>(out->scored_plan_index[j]);
    const int64_t targets = static_cast<int64_t>(plan.sequences[i].score_targets.size());
    for (int64_t t = 0; t < targets; ++t) {
      ints[out->logit_rows + out->scored_logit_row[j] + t] = static_cast<int32_t>(first_row[i] + t);
    }
  }
}

void PadDecodeStep(int32_t batch, int32_t table_width, int32_t block_size, StepLayout* step) {
  CHECK_EQ(step->num_prefill(), 0) << "only decode steps are padded";
  CHECK_EQ(step->num_scored_rows, 0) << "steps that score prompt tokens are not padded";
  CHECK_GE(batch, step->num_decode);
  CHECK_GE(table_width, step->max_blocks_per_seq);
  const StepLayout real = *step;  // the unpadded arrays (copied: `step` is rebuilt in place)
  const int32_t b = real.num_decode;
  auto at = [&real](int64_t offset, int64_t i) { return real.ints[offset + i]; };
  // A padding row is a one-token sequence: its position 0 is a local row on CP rank 0 only.
  const int32_t padding_cp_rows =
      static_cast<int32_t>(ContextParallelShard{real.cp_rank, real.cp_size}.LocalRows(1));
  step->num_sequences = step->num_decode = batch;
  step->num_rows = step->first_draft_row = batch;
  step->max_blocks_per_seq = table_width;
  step->max_decode_context = int64_t{table_width} * block_size;
  if (step->cp_size > 1) step->max_cp_query_len = step->max_decode_context;
  step->num_logit_rows = batch;
  step->row_offset.resize(static_cast<size_t>(batch) + 1);
  for (int32_t r = 0; r <= batch; ++r) step->row_offset[r] = r;
  // Decode sequence s is row s: the sampled tokens' rows are their execution positions.
  for (size_t i = 0; i < real.sampled_plan_index.size(); ++i) {
    const auto it =
        std::find(real.plan_index.begin(), real.plan_index.end(), real.sampled_plan_index[i]);
    step->sampled_logit_row[i] = static_cast<int32_t>(it - real.plan_index.begin());
  }
  AssignOffsets(step);
  int32_t* ints = step->ints.data();
  ints[step->live_rows] = b;
  for (int32_t r = 0; r < batch; ++r) {
    const bool live = r < b;
    ints[step->token_ids + r] = live ? at(real.token_ids, r) : 0;
    ints[step->slot_mapping + r] = live ? at(real.slot_mapping, r) : -1;
    ints[step->kda_slots + r] = live ? at(real.kda_slots, r) : -1;
    ints[step->seq_lens + r] = live ? at(real.seq_lens, r) : 1;
    ints[step->logit_rows + r] = r;
    if (step->cp_size > 1) {
      ints[step->cp_query_seq + r] = r;
      ints[step->cp_query_len + r] = live ? at(real.cp_query_len, r) : padding_cp_rows;
    }
    for (int32_t w = 0; live && w < real.max_blocks_per_seq; ++w) {
      ints[step->block_tables + int64_t{r} * table_width + w] =
          at(real.block_tables, int64_t{r} * real.max_blocks_per_seq + w);
    }
  }
}

}  // namespace strata::engine::cuda
