// Kimi Delta Attention core (docs/model.md §3.4, §3.6), per head h, D = head_dim (dk = dv = D).
//
// Inputs (all row-major, f32):
//   q, k: [T, H·D]  already L2-normalised; q also scaled by D^-1/2
//   v:    [T, H·D]
//   g:    [T, H·D]  per-channel log decay (≤ 0), α = exp(g)
//   beta: [T, H]
//   state: [H, D, D] in/out, S[h][i][j] with i the key channel, j the value channel
//          (o = Sᵀ q); zeros for a new sequence
// Output o: [T, H·D].
//
// Recurrent form, per token:
//   S ← diag(exp(g_t)) S;  e = v_t − Sᵀ k_t;  S ← S + β_t k_t eᵀ;  o_t = Sᵀ q_t
#pragma once

#include <cstdint>

namespace strata::kernels {

void KdaRecurrentReference(const float* q, const float* k, const float* v, const float* g,
                           const float* beta, int64_t num_tokens, int num_heads, int head_dim,
                           float* state, float* o);

}  // namespace strata::kernels
