// What the fused KDA kernels (kda_decode.h, kda_chunk.h) take: one KDA layer's parameters, the
// projected rows of a ragged batch, and each sequence's caches (docs/model.md §3).
//
// Rows of all sequences are concatenated, as in engine/forward_batch.h: sequence i owns rows
// [row_offset_i, row_offset_i + num_tokens_i) of every [num_rows, ·] array. P = H·D.
//
//   per sequence:  state [H, D, D] f32, S[h][i][j], i = key channel, j = value channel (o = Sᵀq)
//                  conv  [3, K−1, P] f32, the last K−1 pre-conv inputs of q, k, v (oldest first)
//
// From the projections to the input of o_proj, per token and head (all f32):
//   q = L2Norm(SiLU(conv(q_raw)))·D^-1/2,  k = L2Norm(SiLU(conv(k_raw))),  v = SiLU(conv(v_raw))
//   g = lb·σ(e^A_log·(f + dt_bias))  (bounded, K3)   |   −e^A_log·softplus(f + dt_bias)
//   (Kimi-Linear) β = σ(b);  S ← Diag(e^g) S;  S ← S + β k (v − Sᵀk)ᵀ;  o = Sᵀ q y = RMSNorm_D(o;
//   o_norm, eps) ⊙ σ(gate)
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

struct KdaLayerParams {
  int num_heads = 0;               // H
  int head_dim = 0;                // D (≤ kKdaMaxHeadDim)
  int conv_kernel_size = 0;        // K (≤ kKdaMaxConvKernel)
  const float* q_conv = nullptr;   // [P, K] depthwise taps; tap K−1 multiplies the current token
  const float* k_conv = nullptr;   // [P, K]
  const float* v_conv = nullptr;   // [P, K]
  const float* a_log = nullptr;    // [H] (only the first H entries are read)
  const float* dt_bias = nullptr;  // [P]
  bool has_gate_lower_bound = false;  // true: the bounded K3 gate
  float gate_lower_bound = 0.0f;      // lb < 0 when bounded
  const float* o_norm = nullptr;      // [D] RMSNorm weight shared by the heads
  float o_norm_eps = 1e-5f;
  float l2_norm_eps = 1e-6f;
};

constexpr int kKdaMaxHeadDim = 512;
constexpr int kKdaMaxConvKernel = 8;

// The layer's inputs for all rows of the batch (projection outputs, nothing applied yet).
struct KdaRows {
  const float* q = nullptr;     // [num_rows, P] pre-conv
  const float* k = nullptr;     // [num_rows, P] pre-conv
  const float* v = nullptr;     // [num_rows, P] pre-conv
  const float* f = nullptr;     // [num_rows, P] gate input f_b(f_a(x)), dt_bias not yet added
  const float* b = nullptr;     // [num_rows, H] β logits
  const float* gate = nullptr;  // [num_rows, P] output-gate logits
};

// One sequence of the batch and its caches (both updated in place).
struct KdaSequence {
  int64_t row_offset = 0;
  int64_t num_tokens = 0;
  float* state = nullptr;  // [H, D, D]
  float* conv = nullptr;   // [3, K−1, P]
  // false (KdaPrefill only): the outputs are computed from the caches, which are left as they
  // were — a forward verifying speculative drafts, whose accepted tokens are replayed into the
  // caches once the sampler has judged them (docs/model.md §3.7 rule 6).
  bool update_caches = true;
};

}  // namespace strata::kernels::cpu
