// The token mixers and feed-forward blocks of one decoder layer, applied to a ragged batch
// (forward_batch.h). Inputs are the normalised hidden rows x [num_rows, d]; outputs [num_rows, d]
// are overwritten. Mixers read and update each sequence's caches; temporaries come from `ws`.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/forward_batch.h"
#include "engine/kda_drafts.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/tensor_parallel.h"
#include "engine/workspace.h"

namespace strata::engine {

// Row range of one sequence inside the concatenated batch.
struct RowSpan {
  int64_t offset = 0;
  int64_t count = 0;
};

// KDA (docs/model.md §3). `kda_index`: this layer's ordinal among KDA layers (cache slot index).
// Sequences verifying drafts (kda_draft_row ≥ 0) leave their caches and save their rows in
// `drafts` (kda_drafts.h).
void KdaMixerForward(const ModelConfig& cfg, const KdaWeights& w, const float* x, int64_t num_rows,
                     ForwardBatch batch, absl::Span<const RowSpan> rows, int kda_index,
                     KdaDraftRows* drafts, float* out, Workspace& ws);

// The replay of saved draft rows through one KDA layer (Model::ReplayKdaDrafts).
void KdaReplayLayer(const ModelConfig& cfg, const KdaWeights& w, const KdaDraftRows& drafts,
                    absl::Span<const KdaReplay> sequences, int kda_index, Workspace& ws);

// Decode context parallelism inside an MLA layer (engine/tensor_parallel.h): the group the
// latent rows are spread over and this rank's place in it.
struct MlaContextParallel {
  TensorParallelGroup* group = nullptr;
  ContextParallelShard shard;
};

// Gated MLA, NoPE (docs/model.md §4). `mla_index`: this layer's ordinal among MLA layers. With
// `cp`, the sequences' block tables address this rank's local rows (position p at row p / C, only
// p ≡ rank mod C stored here) and attention runs over the group (MlaContextParallelAttention).
void MlaMixerForward(const ModelConfig& cfg, const MlaWeights& w, const float* x, int64_t num_rows,
                     ForwardBatch batch, absl::Span<const RowSpan> rows, int mla_index, float* out,
                     Workspace& ws, const MlaContextParallel* cp = nullptr);

// Dense gated MLP (dense first layers; also the fused shared experts).
void MlpForward(const ModelConfig& cfg, const MlpWeights& w, const float* x, int64_t num_rows,
                float* out, Workspace& ws);

// MoE blocks: engine/moe.h.

}  // namespace strata::engine
