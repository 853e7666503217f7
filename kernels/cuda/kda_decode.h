// KDA fused decode step over a batch of state slots (docs/model.md §3.1–§3.5, one token per
// sequence): causal short conv (+ cache shift) → SiLU → q/k L2 norm → gate g and β → delta-rule
// recurrence on the state → gated RMSNorm of the output. A persistent grid walks the (batch row,
// head) items, staging each next item's state into shared memory while the current one computes.
//
// Shapes (B batch rows, H heads, D = head_dim = 128, C = 3·H·D, K = conv_size ≤ 4):
//   qkv_raw     [B, C] f32   pre-conv projections, channels [q (H·D) | k (H·D) | v (H·D)]
//   f           [B, H·D] f32 gate input (f_b_proj output, before dt_bias)
//   b_raw       [B, H] f32   β logits
//   g_raw       [B, H·D] f32 output-gate logits
//               (qkv_raw, b_raw and g_raw rows may be strided: KdaDecodeInputs::*_stride)
//   conv_w      [C, K] f32   index K−1 multiplies the current token
//   a_log [H], dt_bias [H·D], o_norm_w [D]: f32 parameters
//   slots       [B] int32    state row of batch row b, distinct; < 0: padding (y row
//                            written as 0, no state touched)
//   state       [rows, H, D, D] f32 or bf16 bits: S[h][i][j], i key, j value (o = Sᵀq)
//   conv_state  [rows, K−1, C] f32: last K−1 pre-conv inputs, oldest first
//   y           [B, H·D] f32 or bf16 bits
// Math is f32 throughout; a bf16 state is widened on load and rounded (nearest even) on store.
// The reference chain is ShortConvSilu → L2Norm → KdaGate/Sigmoid → KdaRecurrent →
// GatedRmsNorm (kernels/reference).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace strata::kernels::cuda {

inline constexpr int kKdaHeadDim = 128;

struct KdaDecodeParams {
  int batch = 0;
  int num_heads = 0;
  int head_dim = kKdaHeadDim;    // must be 128
  int conv_size = 4;             // 1..4
  bool has_lower_bound = false;  // K3 gate (lower_bound·σ(·)); else Kimi-Linear (−e^A·softplus)
  float lower_bound = -5.0f;
  float norm_eps = 1e-5f;  // o_norm
  float l2_eps = 1e-6f;    // q/k L2 norm
  // false (multi-token forms): y is computed from the state and conv rows, which are left as
  // they were — a forward verifying speculative drafts (engine/kda_drafts.h).
  bool update_caches = true;
};

struct KdaDecodeInputs {
  const float* qkv_raw = nullptr;
  const float* f = nullptr;
  const float* b_raw = nullptr;
  const float* g_raw = nullptr;
  const float* conv_w = nullptr;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  const float* o_norm_w = nullptr;
  const int32_t* slots = nullptr;
  // Row strides in floats; 0: dense rows (3·H·D, H and H·D). The inputs may be column ranges of
  // one wider product ([q|k|v|b|g] from one GEMM of every input projection). The chunked form
  // loads qkv and g rows 16 bytes at a time: their strides must then be multiples of 4.
  int64_t qkv_stride = 0;
  int64_t b_stride = 0;
  int64_t g_stride = 0;
  // Multi-token forms, may be null: sequence n stops at token seq_ends[n] ≤ cu_seqlens[n + 1]
  // (the replay of the kept part of a verified run: engine/kda_drafts.h).
  const int32_t* seq_ends = nullptr;
};

absl::Status KdaDecodeStep(const KdaDecodeInputs& in, float* state, float* conv_state,
                           const KdaDecodeParams& params, float* y, cudaStream_t stream);
absl::Status KdaDecodeStep(const KdaDecodeInputs& in, float* state, float* conv_state,
                           const KdaDecodeParams& params, uint16_t* y, cudaStream_t stream);
// bf16 state (raw bits).
absl::Status KdaDecodeStepBf16State(const KdaDecodeInputs& in, uint16_t* state, float* conv_state,
                                    const KdaDecodeParams& params, float* y, cudaStream_t stream);
absl::Status KdaDecodeStepBf16State(const KdaDecodeInputs& in, uint16_t* state, float* conv_state,
                                    const KdaDecodeParams& params, uint16_t* y,
                                    cudaStream_t stream);

// Multi-token (prefill) form on the same kernel: sequence n (params.batch = sequences) owns
// tokens [cu_seqlens[n], cu_seqlens[n+1]) of the token-major inputs and output, and state row
// in.slots[n]. The tokens run through the recurrence one after another inside one CTA per
// (sequence, head), the state staying in registers: exact for any gate (the safe path for
// Kimi-Linear's unbounded gate), but sequential in T. The chunked tensor-core form (chunk 16,
// K3's bounded gate) is KdaPrefillChunked (kda_chunk.h).
absl::Status KdaPrefillRecurrent(const KdaDecodeInputs& in, const int32_t* cu_seqlens, float* state,
                                 float* conv_state, const KdaDecodeParams& params, uint16_t* y,
                                 cudaStream_t stream);
absl::Status KdaPrefillRecurrent(const KdaDecodeInputs& in, const int32_t* cu_seqlens, float* state,
                                 float* conv_state, const KdaDecodeParams& params, float* y,
                                 cudaStream_t stream);
absl::Status KdaPrefillRecurrentBf16State(const KdaDecodeInputs& in, const int32_t* cu_seqlens,
                                          uint16_t* state, float* conv_state,
                                          const KdaDecodeParams& params, uint16_t* y,
                                          cudaStream_t stream);

}  // namespace strata::kernels::cuda
