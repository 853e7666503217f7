// KDA chunkwise-parallel form for prefill; conventions in kda_decode.h.
#pragma once

#include <cstdint>

namespace strata::kernels {

// Chunkwise-parallel form (UT transform / WY representation) with chunk size `chunk_size`
// (16 or 64; any T, the last chunk may be partial). Numerically safe for unbounded gates:
// never forms exp(±G) of a cumulative sum alone; every pairwise decay exp(G_r − G_s), r ≥ s,
// is built directly as the sum of g over (s, r], so every exponent is ≤ 0.
// Equal to the recurrent form up to f32 rounding.
void KdaChunkReference(const float* q, const float* k, const float* v, const float* g,
                       const float* beta, int64_t num_tokens, int num_heads, int head_dim,
                       int chunk_size, float* state, float* o);

}  // namespace strata::kernels
