// KDA chunkwise-parallel form for prefill; conventions in kda_recurrent.h.
#pragma once

#include <cstdint>

namespace strata::kernels {

// Chunkwise-parallel form (UT transform / WY representation) with chunk size `chunk_size`
// (16 or 64; any T, the last chunk may be partial). Numerically safe for unbounded gates:
// never forms exp(−G) over a span; pairwise decays exp(G_r − G_s) are taken relative to a
// reference point so every exponent is ≤ 0. Equal to the recurrent form up to f32 rounding.
void KdaChunkReference(const float* q, const float* k, const float* v, const float* g,
                       const float* beta, int64_t num_tokens, int num_heads, int head_dim,
                       int chunk_size, float* state, float* o);

}  // namespace strata::kernels
