// Chunkwise-parallel KDA for prefill (docs/model.md §3.6): the UT transform / WY form, per head, on
// chunks of C tokens, equal to the recurrent form (§3.4) up to f32 rounding.
//
// Per chunk (n ≤ C rows), with G the f64 cumulative log decay from the chunk start (≤ 0,
// non-increasing), ref = G_last/2 per channel, and every exponent below ≤ 60 in magnitude:
//   L   = tril₋₁( (K⊙e^{G−ref}) (K⊙e^{ref−G})ᵀ ) · Diag(β) rows,  A = tril( (Q⊙e^{G−ref})
//   (K⊙e^{ref−G})ᵀ ) U   = (I + L)⁻¹ Diag(β) (V − (K⊙e^G) S)               forward substitution O
//   = (Q⊙e^G) S + A U S  ← Diag(e^{G_last}) S + (K⊙e^{G_last−G})ᵀ U
// The factorised e^{G_r−G_s} = e^{G_r−ref}·e^{ref−G_s} keeps both factors in [e^-60, e^60] for
// channels whose decay over the chunk is ≤ 120 (always for the bounded K3 gate at C = 16:
// 16·5 = 80). Channels with a larger span (the unbounded Kimi-Linear gate) are "unsafe": they
// are left out of the two products and added pairwise with e^{G_r−G_s} from f64 differences, so
// nothing overflows and nothing is lost to cancellation whatever the gate. The products are
// register-tiled small GEMMs (4 rows × 64 columns on AVX-512, 4 × 16 on AVX2).
//
// Parallelism: ParallelFor (thread_pool.h) over (sequence, head) tasks; each task runs all chunks
// of its head on one thread in a fixed order, so results do not depend on the batch or the thread
// count, only on the ISA path (ActiveIsa(): AVX-512 or AVX2; Isa::kScalar runs the AVX2 code).
// No heap allocation once the per-thread scratch has grown.
#pragma once

#include <cstdint>

#include "kernels/cpu/kda_layer.h"

namespace strata::kernels::cpu {

// Chunk size used by the engine (kda_bench measures 16, 32 and 64).
constexpr int kKdaDefaultChunkSize = 16;

// The whole layer step for sequences of any num_tokens ≥ 1 (contract of KdaDecode in
// kda_decode.h): conv with the carried conv cache, norms, gates, the chunked recurrence from
// each sequence's state, and the gated RMS norm into y[row, P]. chunk_size: 16, 32, 48 or 64.
// A sequence with update_caches == false gets the same y and keeps its caches unchanged.
void KdaPrefill(const KdaLayerParams& p, const KdaSequence* seqs, int64_t num_seqs,
                const KdaRows& rows, int chunk_size, float* y);

// The chunked recurrence alone, on prepared inputs; same contract as KdaChunkReference
// (kernels/reference/kda_chunk.h): q, k, v, g [T, H·D], beta [T, H], state [H, D, D] in/out,
// o [T, H·D].
void KdaChunk(const float* q, const float* k, const float* v, const float* g, const float* beta,
              int64_t num_tokens, int num_heads, int head_dim, int chunk_size, float* state,
              float* o);

}  // namespace strata::kernels::cpu
