// The split-K work item both MLA decode kernels share (mla_decode.cu, mla_decode_wgmma.cu;
// internal): CTA (head tile, split, query) of grid (ceil(H / heads_per_cta), splits, batch)
// attends to the pages [page_begin, page_end) of its query's context and writes its rows
// part_row0 .. part_row0 + heads_here − 1 of o_part [batch, splits, H, 512] and lse_part.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mla_decode.h"

namespace strata::kernels::cuda::internal {

struct MlaSplit {
  int seq_len = 0;
  int page_begin = 0;
  int page_end = 0;  // page_begin ≥ page_end: nothing to attend to
  int head0 = 0;
  int heads_here = 0;
  int64_t part_row0 = 0;
};

__device__ __forceinline__ MlaSplit MlaSplitOfThisCta(const int32_t* seq_lens, int num_heads,
                                                      int heads_per_cta, int pages_per_split,
                                                      int num_splits) {
  MlaSplit s;
  const int split = blockIdx.y, b = blockIdx.z;
  s.head0 = blockIdx.x * heads_per_cta;
  s.heads_here = min(heads_per_cta, num_heads - s.head0);
  s.seq_len = seq_lens[b];
  const int num_pages = s.seq_len > 0 ? (s.seq_len + kMlaPageSize - 1) / kMlaPageSize : 0;
  s.page_begin = split * pages_per_split;
  s.page_end = min(s.page_begin + pages_per_split, num_pages);
  s.part_row0 = (static_cast<int64_t>(b) * num_splits + split) * num_heads + s.head0;
  return s;
}

// An empty split's result: ō = 0 and LSE = −∞ (the merge gives it no weight).
__device__ __forceinline__ void WriteEmptySplit(const MlaSplit& s, float* o_part, float* lse_part) {
  for (int i = threadIdx.x; i < s.heads_here * kMlaValueDim; i += blockDim.x) {
    o_part[s.part_row0 * kMlaValueDim + i] = 0.0f;
  }
  if (static_cast<int>(threadIdx.x) < s.heads_here) lse_part[s.part_row0 + threadIdx.x] = -INFINITY;
}

}  // namespace strata::kernels::cuda::internal
