// MoE router, DeepSeek-V3 `noaux_tc` (docs/model.md §6.1, docs/checkpoint.md §5), f32:
//   s = sigmoid(logits);  s' = s + bias (selection only)
//   groups (num_groups > 1): group score = sum of the 2 largest s' in the group; keep the
//     topk_group best groups; experts of other groups score 0.0 for selection
//   T = top-k of s' (ties: lower expert id first)
//   w_i = s_i / (Σ_{j∈T} s_j + 1e-20) (when renormalize and k > 1) · scaling
// logits: [T, E] (x · gateᵀ); bias: [E] (may be null); expert_ids, weights: [T, k], ordered by
// descending biased score.
#pragma once

#include <cstdint>

namespace strata::kernels {

struct RouterParams {
  int num_experts;
  int top_k;
  int num_groups = 1;
  int topk_group = 1;
  bool renormalize = true;
  float scaling = 1.0f;
};

void RouteReference(const float* logits, int64_t num_tokens, const float* bias,
                    const RouterParams& params, int32_t* expert_ids, float* weights);

}  // namespace strata::kernels
