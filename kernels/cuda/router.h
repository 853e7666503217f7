// MoE router on the GPU: DeepSeek-V3 `noaux_tc` (docs/model.md §6.1), the exact selection rules of
// kernels/reference/router.h: σ in f64 rounded to f32, + bias in f32, group limit (sum of the
// two best biased scores per group, dropped groups score 0.0), top-k with ties to the lower
// expert id, weights from the unbiased scores renormalised in f64. One CTA per token;
// RouteAndPermute also groups the chosen pairs by expert in the same launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/moe.h"
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

// Where RouteAndPermute puts the permutation, as MoePermute (moe.h) takes it.
struct RoutePermutation {
  int num_experts = 0;  // experts the pairs are grouped by (this rank's, under options.local_of)
  MoePermuteOptions options;
  int32_t* expert_offsets = nullptr;  // [num_experts + 1]
  int32_t* permuted_token = nullptr;  // [tokens·top_k]
  int32_t* pair_row = nullptr;        // [tokens·top_k]
  // One int32 on the device, zero before the first call; every call leaves it zero again. Calls
  // sharing it must be ordered on one stream (one counter per model and stream).
  int32_t* done_counter = nullptr;
  // MoePermuteWorkspaceBytes(num_experts): the larger batches' separate MoePermute.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
};

// Route, then the permutation of the ids just chosen in the SAME launch: the last routing CTA
// to finish (counted on done_counter) groups every pair by expert, exactly as MoePermute does —
// router, top-k and permutation in one kernel at decode sizes (tokens·top_k ≤
// kMoePermuteOneLaunchPairs, ≤ kMaxRouterExperts groups). Larger batches take Route and then
// MoePermute's launches.
absl::Status RouteAndPermute(const float* logits, int64_t tokens, const float* bias,
                             const RouterParams& params, int32_t* expert_ids, float* weights,
                             const RoutePermutation& permute, cudaStream_t stream);

}  // namespace strata::kernels::cuda
