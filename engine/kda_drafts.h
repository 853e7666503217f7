// KdaDraftRows: the projected KDA inputs of tokens a forward verifies as speculative drafts,
// kept until the sampler has judged the drafts (docs/model.md §3.7 rule 6).
//
// A verifying forward cannot know which of its tokens will be kept, so its KDA layers save the
// rows here and either compute from each sequence's caches without changing them
// (kernels/cpu/kda_layer.h, update_caches) or update them while the caller holds a copy from
// before the step; Model::ReplayKdaDrafts then runs the first 1 + accepted rows through the
// same kernels from the untouched (or restored) caches. The replay reads no weights (the rows
// are already projected) and touches each state once, where recomputing the accepted tokens
// in a later forward would cost a forward pass over them (CpuExecutor chooses per sequence).
//
// Layout: per KDA layer, q, k, v, f [num_rows, P] and b [num_rows, H] (P = H·D), a sequence's
// rows at its ForwardSequence::kda_draft_row.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/forward_batch.h"
#include "engine/model_config.h"
#include "kernels/cpu/kda_layer.h"

namespace strata::engine {

class KdaDraftRows {
 public:
  // Room for num_rows token rows in every KDA layer of `cfg` (grows only: steady-state steps
  // allocate nothing).
  void Reserve(const ModelConfig& cfg, int64_t num_rows);
  int64_t num_rows() const { return num_rows_; }

  // Copies `count` rows of layer `kda_index`'s projections (from row `from_row` of `from`) to
  // row `row` of the store.
  void Save(int kda_index, int64_t row, const kernels::cpu::KdaRows& from, int64_t from_row,
            int64_t count);
  // Layer `kda_index`'s saved rows. `gate` aliases f: a replay discards its outputs, so the
  // output gate only has to be readable.
  kernels::cpu::KdaRows Layer(int kda_index) const;

 private:
  // Index in data_ of layer `kda_index`'s first plane.
  size_t LayerOffset(int kda_index) const;
  int64_t num_rows_ = 0, width_ = 0, heads_ = 0, num_layers_ = 0;
  std::vector<float> data_;
};

// One sequence to advance: its caches, and the first num_tokens of its saved rows (the tokens
// before its drafts and the accepted drafts).
struct KdaReplay {
  const SequenceCacheView* cache = nullptr;
  int64_t draft_row = 0;
  int64_t num_tokens = 0;
};

}  // namespace strata::engine
