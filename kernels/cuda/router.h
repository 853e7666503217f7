// MoE router on the GPU: DeepSeek-V3 `noaux_tc` (docs/model.md §6.1), the exact selection rules of
// kernels/reference/router.h: σ in f64 rounded to f32, + bias in f32, group limit (sum of the
// two best biased scores per group, dropped groups score 0.0), top-k with ties to the lower
// expert id, weights from the unbiased scores renormalised in f64. One CTA per token.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/reference/router.h"

namespace strata::kernels::cuda {

inline constexpr int kMaxRouterExperts = 1024;
inline constexpr int kMaxRouterTopK = 32;
inline constexpr int kMaxRouterGroups = 64;

// logits [tokens, E] f32; bias [E] f32 or null; expert_ids, weights [tokens, top_k], ordered by
// descending biased score.
absl::Status Route(const float* logits, int64_t tokens, const float* bias,
                   const RouterParams& params, int32_t* expert_ids, float* weights,
                   cudaStream_t stream);

}  // namespace strata::kernels::cuda
