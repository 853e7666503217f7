// Fused KDA decode step over a batch of sequences, one new token each (docs/model.md §3.4, §3.7
// rule 4).
//
// Per (sequence, head), from the projected row to the input of o_proj, in one task:
//   conv ring update + SiLU (q, k, v), L2 norms (q scaled by D^-1/2), decay α = e^g from f, β,
//   the delta-rule state update, o, and the gated RMS norm (kda_layer.h has the formulas).
//
// State traffic: the algebra o = Sᵀ_new q = (DS)ᵀq + β(kᵀq)·e, e = v − (DS)ᵀk (D = Diag(α))
// lets one read of S produce both reductions; a second sweep over the same column block
// (L1/L2-resident) writes S_new = D S + k (βe)ᵀ. So S crosses the memory bus once each way.
//
// Parallelism: ParallelFor (thread_pool.h) over tasks of one head × a block of sequences (about
// 4 tasks per thread). Each (sequence, head) is computed by one thread in a fixed order, so a
// sequence's result is bit-identical whatever else is in the batch and whatever the thread
// count; it depends only on the ISA path (ActiveIsa(): AVX-512 or AVX2; Isa::kScalar runs the
// AVX2 code too). No heap allocation once the per-thread scratch has grown.
#pragma once

#include <cstdint>

#include "kernels/cpu/kda_layer.h"

namespace strata::kernels::cpu {

// `seqs[i].num_tokens` must be 1. Reads rows.{q,k,v,f,b,gate} at each sequence's row and writes
// y[row, P] (the o_proj input); updates each sequence's state and conv cache in place.
void KdaDecode(const KdaLayerParams& p, const KdaSequence* seqs, int64_t num_seqs,
               const KdaRows& rows, float* y);

}  // namespace strata::kernels::cpu
