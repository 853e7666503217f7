// Small elementwise and row kernels the CUDA forward pass needs between the big ones
// (engine/cuda/cuda_model.cc), f32 math:
//   AddInPlace       y += x                                         (residual adds, AttnRes sums)
//   GateToBf16       out = bf16(x · σ(g)), or bf16(x) when g is null (MLA output gate before
//                    o_proj; plain f32 → bf16 GEMM-operand conversion)
//   MlaWriteLatents  κ = [RMSNorm(c; w, eps) ; k_pe] of each new token, rounded to bf16 (or
//                    quantized to the fp8 row layout, core/latent_row.h) and written to its latent
//                    cache row (docs/model.md §4.1: only the latent part is normalised)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "core/latent_row.h"

namespace strata::kernels::cuda {

absl::Status AddInPlace(float* y, const float* x, int64_t count, cudaStream_t stream);

absl::Status GateToBf16(const float* x, const float* gate_logits, int64_t count, uint16_t* out,
                        cudaStream_t stream);

// kv [rows, kv_lora_rank + rope_dim] f32 (kv_a_proj output); norm_weight [kv_lora_rank];
// slot_mapping [rows] int32 cache row of each token (negative: skipped);
// pages [cache rows, kv_lora_rank + rope_dim] bf16 bits (dtype kBF16), or [cache rows] fp8 rows
// of LatentBytesPerToken(kFP8, kv_lora_rank + rope_dim, rope_dim) bytes (dtype kFP8).
absl::Status MlaWriteLatents(const float* kv, int64_t rows, int kv_lora_rank, int rope_dim,
                             const float* norm_weight, float eps, const int32_t* slot_mapping,
                             void* pages, LatentDType dtype, cudaStream_t stream);

}  // namespace strata::kernels::cuda
