#include "engine/cuda/step_layout.h"

#include <algorithm>

#include "core/check.h"

namespace strata::engine::cuda {
namespace {

// Execution order: decode sequences, prefill sequences, prefill sequences verifying drafts,
// each in plan order.
void OrderSequences(const StepPlan& plan, StepLayout* out) {
  out->plan_index.clear();
  for (int pass = 0; pass < 3; ++pass) {
    const size_t before = out->plan_index.size();
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      const size_t n = plan.sequences[i].token_ids.size();
      const int kind = n == 1 ? 0 : plan.sequences[i].num_draft_tokens > 0 ? 2 : 1;
      if (n == 0 || kind != pass) continue;
      out->plan_index.push_back(static_cast<int32_t>(i));
    }
    if (pass == 0) out->num_decode = static_cast<int32_t>(out->plan_index.size());
    if (pass == 2) out->num_drafting = static_cast<int32_t>(out->plan_index.size() - before);
  }
  out->num_sequences = static_cast<int32_t>(out->plan_index.size());
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
  out->ints.assign(static_cast<size_t>(at), 0);
}

}  // namespace

void BuildStepLayout(const StepPlan& plan, const kvcache::CacheLayout& layout, StepLayout* out) {
  OrderSequences(plan, out);
  const int64_t bs = layout.block_size;
  out->row_offset.assign(1, 0);
  out->max_blocks_per_seq = 1;
  out->max_decode_context = out->max_prefill_context = 0;
  out->max_prefill_new = out->total_prefill_context = 0;
  for (int32_t s = 0; s < out->num_sequences; ++s) {
    const ScheduledSequence& seq = plan.sequences[static_cast<size_t>(out->plan_index[s])];
    const int64_t context = seq.num_computed_tokens + static_cast<int64_t>(seq.token_ids.size());
    CHECK_GE(static_cast<int64_t>(seq.block_table.size()) * bs, context)
        << "block table of sequence " << seq.seq_id << " is too short";
    CHECK_LE(context, int64_t{1} << 31) << "sequence " << seq.seq_id << " context";
    out->row_offset.push_back(out->row_offset.back() + static_cast<int64_t>(seq.token_ids.size()));
    const int64_t blocks = (context + bs - 1) / bs;
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
      const int32_t block = seq.block_table[static_cast<size_t>(pos / bs)];
      CHECK(block >= 0 && block < layout.num_blocks) << "block " << block << " of " << seq.seq_id;
      ints[out->token_ids + row] = seq.token_ids[static_cast<size_t>(i)];
      ints[out->slot_mapping + row] = static_cast<int32_t>(block * bs + pos % bs);
      if (s >= out->num_decode) {
        ints[out->query_seq + prefill_row] = s;
        ints[out->query_len + prefill_row] = static_cast<int32_t>(pos + 1);
        ++prefill_row;
      }
    }
    first_row[static_cast<size_t>(out->plan_index[s])] = first;
    last_row[static_cast<size_t>(out->plan_index[s])] = first + count - 1;
    const int64_t context = seq.num_computed_tokens + count;
    const int64_t blocks = (context + bs - 1) / bs;
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
  step->num_sequences = step->num_decode = batch;
  step->num_rows = step->first_draft_row = batch;
  step->max_blocks_per_seq = table_width;
  step->max_decode_context = int64_t{table_width} * block_size;
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
    for (int32_t w = 0; live && w < real.max_blocks_per_seq; ++w) {
      ints[step->block_tables + int64_t{r} * table_width + w] =
          at(real.block_tables, int64_t{r} * real.max_blocks_per_seq + w);
    }
  }
}

}  // namespace strata::engine::cuda
