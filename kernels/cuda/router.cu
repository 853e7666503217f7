#include "kernels/cuda/router.h"

#include "core/status.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/launch.cuh"
#include "kernels/cuda/internal/moe_permute.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// (value, index) ordered by value descending, then index ascending.
__device__ __forceinline__ bool Better(float v, int i, float best_v, int best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

// Block-wide best (value, index) among candidates the caller passes per thread; result in
// every thread. `scratch_v`/`scratch_i` hold ≥ 8 entries.
__device__ __forceinline__ void BlockBest(float& v, int& i, float* scratch_v, int* scratch_i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
    const int oi = __shfl_xor_sync(0xffffffffu, i, offset);
    if (Better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    scratch_v[warp] = v;
    scratch_i[warp] = i;
  }
  __syncthreads();
  v = scratch_v[0];
  i = scratch_i[0];
  for (int w = 1; w < kThreads / 32; ++w) {
    if (Better(scratch_v[w], scratch_i[w], v, i)) {
      v = scratch_v[w];
      i = scratch_i[w];
    }
  }
  __syncthreads();
}

// RouteAndPermute's permutation, done by the last CTA to finish routing (done == null: none).
struct PermuteArgs {
  internal::PairExpert expert_of;
  int64_t tokens;
  int32_t* offsets;
  int32_t* permuted_token;
  int32_t* pair_row;
  int32_t* done;
};

__global__ void __launch_bounds__(kThreads)
    RouteKernel(const float* __restrict__ logits, const float* __restrict__ bias, RouterParams p,
                int32_t* __restrict__ expert_ids, float* __restrict__ weights,
                PermuteArgs permute) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ float score[kMaxRouterExperts];
  __shared__ float biased[kMaxRouterExperts];
  __shared__ unsigned char taken[kMaxRouterExperts];
  __shared__ float group_score[kMaxRouterGroups];
  __shared__ unsigned char keep_group[kMaxRouterGroups];
  __shared__ int chosen[kMaxRouterTopK];
  __shared__ float scratch_v[kThreads / 32];
  __shared__ int scratch_i[kThreads / 32];
  const int64_t t = blockIdx.x;
  const int num_experts = p.num_experts;
  for (int e = threadIdx.x; e < num_experts; e += kThreads) {
    const double x = logits[t * num_experts + e];
    const double s = x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    score[e] = static_cast<float>(s);
    biased[e] = bias != nullptr ? score[e] + bias[e] : score[e];
    taken[e] = 0;
  }
  __syncthreads();
  if (p.num_groups > 1) {
    const int group_size = num_experts / p.num_groups;
    for (int grp = threadIdx.x; grp < p.num_groups; grp += kThreads) {
      // The two largest biased scores (ties: lower index first), summed in f32.
      float best = -INFINITY, second = -INFINITY;
      int best_i = 0x7fffffff, second_i = 0x7fffffff;
      for (int e = grp * group_size; e < (grp + 1) * group_size; ++e) {
        if (Better(biased[e], e, best, best_i)) {
          second = best;
          second_i = best_i;
          best = biased[e];
          best_i = e;
        } else if (Better(biased[e], e, second, second_i)) {
          second = biased[e];
          second_i = e;
        }
      }
      group_score[grp] = group_size >= 2 ? 0.0f + best + second : 0.0f + best;
      keep_group[grp] = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int n = 0; n < p.topk_group; ++n) {
        int pick = -1;
        for (int grp = 0; grp < p.num_groups; ++grp) {
          if (!keep_group[grp] && (pick < 0 || group_score[grp] > group_score[pick])) pick = grp;
        }
        keep_group[pick] = 1;
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < num_experts; e += kThreads) {
      if (!keep_group[e / group_size]) biased[e] = 0.0f;
    }
    __syncthreads();
  }
  for (int n = 0; n < p.top_k; ++n) {
    float v = -INFINITY;
    int idx = 0x7fffffff;
    for (int e = threadIdx.x; e < num_experts; e += kThreads) {
      if (!taken[e] && Better(biased[e], e, v, idx)) {
        v = biased[e];
        idx = e;
      }
    }
    BlockBest(v, idx, scratch_v, scratch_i);
    if (threadIdx.x == 0) {
      chosen[n] = idx;
      taken[idx] = 1;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    double sum = 0.0;
    for (int n = 0; n < p.top_k; ++n) sum += score[chosen[n]];
    const bool renormalize = p.renormalize && p.top_k > 1;
    for (int n = 0; n < p.top_k; ++n) {
      double w = score[chosen[n]];
      if (renormalize) w /= sum + 1e-20;
      expert_ids[t * p.top_k + n] = chosen[n];
      weights[t * p.top_k + n] = static_cast<float>(w * p.scaling);
    }
  }
  if (permute.done == nullptr) return;  // uniform across the grid
  __shared__ int last;
  __shared__ int32_t counts[kMaxRouterExperts];
  __shared__ int32_t scan[kThreads];
  if (threadIdx.x == 0) {
    __threadfence();  // this CTA's ids reach L2 before it counts itself done
    last = atomicAdd(permute.done, 1) == static_cast<int>(gridDim.x) - 1;
  }
  __syncthreads();
  if (!last) return;  // uniform across the CTA
  __threadfence();    // every other CTA's ids are in L2 (PairExpert reads them with __ldcg)
  internal::PermuteInBlock(permute.expert_of, permute.tokens, counts, scan, permute.offsets,
                           permute.permuted_token, permute.pair_row);
  if (threadIdx.x == 0) *permute.done = 0;  // ready for the next call (and graph replay)
}

absl::Status CheckParams(int64_t tokens, const RouterParams& p) {
  if (tokens < 0 || tokens > 0x7fffffff || p.num_experts <= 0 ||
      p.num_experts > kMaxRouterExperts || p.top_k < 1 || p.top_k > p.num_experts ||
      p.top_k > kMaxRouterTopK || p.num_groups < 1 || p.num_groups > kMaxRouterGroups ||
      p.num_experts % p.num_groups != 0 || p.topk_group < 1 || p.topk_group > p.num_groups) {
    return absl::InvalidArgumentError("Route: unsupported router params");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Route(const float* logits, int64_t tokens, const float* bias, const RouterParams& p,
                   int32_t* expert_ids, float* weights, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckParams(tokens, p));
  if (tokens == 0) return absl::OkStatus();
  internal::LaunchKernel(RouteKernel, static_cast<unsigned>(tokens), kThreads, 0, stream, logits,
                         bias, p, expert_ids, weights, PermuteArgs{});
  return LaunchStatus("RouteKernel launch");
}

absl::Status RouteAndPermute(const float* logits, int64_t tokens, const float* bias,
                             const RouterParams& p, int32_t* expert_ids, float* weights,
                             const RoutePermutation& permute, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckParams(tokens, p));
  const int64_t pairs = tokens * p.top_k;
  if (tokens == 0 || pairs > kMoePermuteOneLaunchPairs || permute.num_experts > kMaxRouterExperts) {
    RETURN_IF_ERROR(Route(logits, tokens, bias, p, expert_ids, weights, stream));
    return MoePermute(expert_ids, tokens, p.top_k, permute.num_experts, permute.workspace,
                      permute.workspace_bytes, permute.expert_offsets, permute.permuted_token,
                      permute.pair_row, stream, permute.options);
  }
  if (permute.num_experts < 1 || permute.done_counter == nullptr ||
      permute.expert_offsets == nullptr || permute.permuted_token == nullptr ||
      permute.pair_row == nullptr ||
      (permute.options.local_of != nullptr && permute.options.id_space < 1)) {
    return absl::InvalidArgumentError(
        "RouteAndPermute: needs num_experts >= 1, the done counter, offsets, permuted_token and "
        "pair_row, and id_space >= 1 with local_of");
  }
  const PermuteArgs args{{expert_ids, p.top_k, permute.num_experts, permute.options.live_tokens,
                          permute.options.local_of, permute.options.id_space},
                         tokens,
                         permute.expert_offsets,
                         permute.permuted_token,
                         permute.pair_row,
                         permute.done_counter};
  internal::LaunchKernel(RouteKernel, static_cast<unsigned>(tokens), kThreads, 0, stream, logits,
                         bias, p, expert_ids, weights, args);
  return LaunchStatus("RouteKernel launch (with the permutation)");
}

}  // namespace strata::kernels::cuda
