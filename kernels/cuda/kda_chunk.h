// Chunked tensor-core KDA prefill for K3's bounded gate (docs/model.md §3.6): the fast path of
// KdaPrefillRecurrent (kda_decode.h) when g ∈ [lower_bound, 0) with |lower_bound| ≤ 7.5.
//
// Same inputs, shapes and contract as KdaPrefillRecurrent: sequence n (params.batch sequences)
// owns tokens [cu_seqlens[n], cu_seqlens[n+1]) of the token-major inputs and of y, and state row
// in.slots[n] (< 0: padding, its y rows are written as 0 and nothing else is touched). The conv
// cache is updated exactly as the recurrent kernel does (it only moves input values), the state
// and y agree with it up to the bf16 rounding of the tensor-core operands (see below).
//
// Per (sequence, head), chunks of 16 tokens: conv (+ cache shift) → SiLU → q/k L2 norm → gate G
// (cumulative, f32) and β, then with ref = G_last/2 per channel
//   L   = strict_tril((K⊙e^{G−ref}) (K⊙e^{ref−G})ᵀ),   A = tril((Q⊙e^{G−ref}) (K⊙e^{ref−G})ᵀ)
//   U   = (I + Diag(β) L)⁻¹ Diag(β) (V − (K⊙e^G) S)      (forward substitution, f32)
//   O   = (Q⊙e^G) S + A U                                (A U in f32)
//   S  ← Diag(e^{G_last}) S + (K⊙e^{G_last−G})ᵀ U
//   y   = RMSNorm(O)·o_norm_w ⊙ σ(g_raw)
// The four 128-deep / 16-deep products run on tensor cores with bf16 operands and f32
// accumulation; the state stays f32 in registers for the whole sequence (a bf16 state is widened
// on load and rounded once on store). The factorised decay needs every factor within e^±60:
// |lower_bound|·16/2 ≤ 60, hence the limit below. Kimi-Linear's unbounded gate must use
// KdaPrefillRecurrent. No workspace: one kernel, one CTA (256 threads, ~195 KiB shared memory)
// per (sequence, head), the next chunk's inputs prefetched with cp.async while one computes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/kda_decode.h"

namespace strata::kernels::cuda {

// Chunk length of the tensor-core prefill (tokens).
inline constexpr int kKdaPrefillChunk = 16;
// Most negative lower_bound the chunked form accepts (|lb|·chunk/2 ≤ 60).
inline constexpr float kKdaChunkedMinLowerBound = -7.5f;

// InvalidArgument unless params.has_lower_bound, kKdaChunkedMinLowerBound ≤ lower_bound < 0,
// head_dim = 128, 1 ≤ conv_size ≤ 4, num_heads > 0, 0 ≤ batch ≤ 65535; cu_seqlens non-null.
absl::Status KdaPrefillChunked(const KdaDecodeInputs& in, const int32_t* cu_seqlens, float* state,
                               float* conv_state, const KdaDecodeParams& params, float* y,
                               cudaStream_t stream);
absl::Status KdaPrefillChunked(const KdaDecodeInputs& in, const int32_t* cu_seqlens, float* state,
                               float* conv_state, const KdaDecodeParams& params, uint16_t* y,
                               cudaStream_t stream);
// bf16 state (raw bits).
absl::Status KdaPrefillChunkedBf16State(const KdaDecodeInputs& in, const int32_t* cu_seqlens,
                                        uint16_t* state, float* conv_state,
                                        const KdaDecodeParams& params, float* y,
                                        cudaStream_t stream);
absl::Status KdaPrefillChunkedBf16State(const KdaDecodeInputs& in, const int32_t* cu_seqlens,
                                        uint16_t* state, float* conv_state,
                                        const KdaDecodeParams& params, uint16_t* y,
                                        cudaStream_t stream);

}  // namespace strata::kernels::cuda
