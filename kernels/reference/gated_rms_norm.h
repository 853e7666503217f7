// KDA output path: per-head RMSNorm times a sigmoid gate.
#pragma once

#include <cstdint>

namespace strata::kernels {

// y_h = RMSNorm_D(o_h; weight[D], eps) ⊙ sigmoid(gate_h), per token and head.
// o, gate, y: [T, H·D]; weight: [D] shared by all heads. y may alias o.
void GatedRmsNormReference(const float* o, const float* gate, int64_t num_tokens, int num_heads,
                           int head_dim, const float* weight, float eps, float* y);

}  // namespace strata::kernels
