// The MoE permutation's device steps (internal; .cu files only), shared by MoePermute (moe.cu) and
// RouteAndPermute (router.cu), whose last routing CTA permutes the pairs the grid just chose.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/internal/device_math.cuh"

namespace strata::kernels::cuda::internal {

// The expert a pair is grouped under: its id, mapped to this rank's experts under tensor
// parallelism, −1 when dropped (another rank's expert, a padding token, an id out of range). Ids
// are read through L2 (__ldcg): RouteAndPermute's last CTA reads what other CTAs wrote.
struct PairExpert {
  const int32_t* ids;
  int top_k;
  int num_experts;
  const int32_t* live_tokens;  // may be null
  const int32_t* local_of;     // may be null
  int id_space;

  __device__ __forceinline__ int operator()(int64_t p, int64_t live) const {
    if (p / top_k >= live) return -1;
    int e = __ldcg(ids + p);
    if (local_of != nullptr) e = e >= 0 && e < id_space ? local_of[e] : -1;
    return e >= 0 && e < num_experts ? e : -1;
  }
  __device__ __forceinline__ int64_t Live(int64_t tokens) const {
    return live_tokens != nullptr ? min(static_cast<int64_t>(*live_tokens), tokens) : tokens;
  }
};

// Pair p's row: the next free one of its expert (cursors[e], global or shared memory), or −1.
__device__ __forceinline__ void PlacePair(const PairExpert& expert_of, int64_t p, int64_t live,
                                          int32_t* cursors, int32_t* __restrict__ permuted_token,
                                          int32_t* __restrict__ pair_row) {
  const int e = expert_of(p, live);
  if (e < 0) {
    pair_row[p] = -1;
    return;
  }
  const int32_t row = atomicAdd(&cursors[e], 1);
  permuted_token[row] = static_cast<int32_t>(p / expert_of.top_k);
  pair_row[p] = row;
}

// The whole permutation by the calling CTA (every thread calls it): counters in shared memory
// (`counts`: num_experts int32), a block-wide exclusive scan (`scan`: blockDim.x int32; each
// thread owns a run of experts) into offsets [E+1], then placement through the shared cursors;
// permuted_token is zero-filled first, so rows past offsets[E] name token 0. Global writes of
// one phase reach the next through __syncthreads (one CTA).
__device__ __forceinline__ void PermuteInBlock(const PairExpert& expert_of, int64_t tokens,
                                               int32_t* counts, int32_t* scan,
                                               int32_t* __restrict__ offsets,
                                               int32_t* __restrict__ permuted_token,
                                               int32_t* __restrict__ pair_row) {
  const int tid = threadIdx.x, threads = blockDim.x, num_experts = expert_of.num_experts;
  const int64_t pairs = tokens * expert_of.top_k, live = expert_of.Live(tokens);
  for (int e = tid; e < num_experts; e += threads) counts[e] = 0;
  __syncthreads();
  for (int64_t p = tid; p < pairs; p += threads) {
    permuted_token[p] = 0;
    const int e = expert_of(p, live);
    if (e >= 0) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  const int per = (num_experts + threads - 1) / threads;
  const int e_begin = min(tid * per, num_experts), e_end = min(e_begin + per, num_experts);
  int32_t local = 0;
  for (int e = e_begin; e < e_end; ++e) local += counts[e];
  scan[tid] = local;
  BlockInclusiveScan(scan);
  int32_t next = scan[tid] - local;
  for (int e = e_begin; e < e_end; ++e) {  // counts become the cursors
    const int32_t c = counts[e];
    offsets[e] = next;
    counts[e] = next;
    next += c;
  }
  if (tid == threads - 1) offsets[num_experts] = scan[tid];
  __syncthreads();
  for (int64_t p = tid; p < pairs; p += threads) {
    PlacePair(expert_of, p, live, counts, permuted_token, pair_row);
  }
}

}  // namespace strata::kernels::cuda::internal
