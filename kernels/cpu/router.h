// MoE router, DeepSeek-V3 `noaux_tc` (docs/model.md §6.1), vectorised; the same contract and the
// same selection as kernels/reference/router.h (ties: lower expert id first; experts of
// dropped groups score 0.0 for selection):
//   s = score(logits)   (sigmoid per expert, or softmax over the experts);  s' = s + bias
//   groups (num_groups > 1): group score = sum of the 2 largest s' in the group; keep the
//     topk_group best groups; experts of other groups get s' = 0.0
//   T = top-k of s';  w_i = s_i / (Σ_{j∈T} s_j + 1e-20) (when renormalize and k > 1) · scaling
// Scores are f32 (vector exp, ≤ 2 ulp from the f64-rounded reference), the renormalisation
// f64. AVX-512 or AVX2 by ActiveIsa() (STRATA_ISA=scalar: the reference, sigmoid only).
// Tokens are OpenMP-parallel when there are many. No heap allocation.
#pragma once

#include <cstdint>

#include "kernels/reference/router.h"

namespace strata::kernels::cpu {

enum class RouterScoring { kSigmoid, kSoftmax };

inline constexpr int kMaxRouterExperts = 2048;
inline constexpr int kMaxRouterTopK = 128;

// logits [num_tokens, E] (x · gateᵀ); bias [E] (may be null); expert_ids, weights
// [num_tokens, k], ordered by descending biased score. E ≤ kMaxRouterExperts, k ≤ kMaxRouterTopK.
void Route(const float* logits, int64_t num_tokens, const float* bias, const RouterParams& params,
           int32_t* expert_ids, float* weights, RouterScoring scoring = RouterScoring::kSigmoid);

}  // namespace strata::kernels::cpu
