// The token mixers and feed-forward blocks of one decoder layer, applied to a ragged batch
// (forward_batch.h). Inputs are the normalised hidden rows x [num_rows, d]; outputs [num_rows, d]
// are overwritten. Mixers read and update each sequence's caches.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/forward_batch.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"

namespace strata::engine {

// Row range of one sequence inside the concatenated batch.
struct RowSpan {
  int64_t offset = 0;
  int64_t count = 0;
};

// KDA (MODEL.md §3). `kda_index`: this layer's ordinal among KDA layers (cache slot index).
void KdaMixerForward(const ModelConfig& cfg, const KdaWeights& w, const float* x, int64_t num_rows,
                     const std::vector<ForwardSequence>& batch, const std::vector<RowSpan>& rows,
                     int kda_index, float* out);

// Gated MLA, NoPE (MODEL.md §4). `mla_index`: this layer's ordinal among MLA layers.
void MlaMixerForward(const ModelConfig& cfg, const MlaWeights& w, const float* x, int64_t num_rows,
                     const std::vector<ForwardSequence>& batch, const std::vector<RowSpan>& rows,
                     int mla_index, float* out);

// Dense gated MLP (dense first layers; also the fused shared experts).
void MlpForward(const ModelConfig& cfg, const MlpWeights& w, const float* x, int64_t num_rows,
                float* out);

// MoE / Stable LatentMoE (MODEL.md §6): router, routed experts grouped by expert, latent
// projections + norm, shared experts.
// `expert_tokens` [num_experts] (may be null): incremented by the tokens routed to each expert.
void MoeForward(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t num_rows,
                float* out, int64_t* expert_tokens = nullptr);

}  // namespace strata::engine
