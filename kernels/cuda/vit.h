// The vision tower's own kernels on the GPU (MoonViT-V2, docs/vision.md), the device twins of
// kernels/reference/vit.h (same layouts, same arithmetic up to f32 rounding): the bilinear
// position table, 2-D RoPE, per-image non-causal attention, the 2×2 merge and the two GELUs.
// The tower's norms, adds and products are norm.h, model_ops.h and gemm.h. All asynchronous on
// `stream`, device pointers; a bad shape is InvalidArgument.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace strata::kernels::cuda {

// The widest head VitAttention takes.
inline constexpr int kVitMaxHeadDim = 128;

// x[r·out_w + c, :] += the table [in_h, in_w, d] resized to [out_h, out_w] bilinearly.
absl::Status VitAddBilinearPositions(const float* table, int in_h, int in_w, int d, int out_h,
                                     int out_w, float* x, cudaStream_t stream);

// 2-D rotary embedding in place on every head of rows [grid_h·grid_w] with row stride `stride`
// (head_dim % 4 == 0; angles in f64 as the reference).
absl::Status VitRope2d(float* x, int64_t stride, int grid_h, int grid_w, int num_heads,
                       int head_dim, float theta, cudaStream_t stream);

// out[p, h] = softmax_j(q[p, h] · k[j, h] · scale) · v[j, h] over all n rows (non-causal, one
// image); q, k, v row stride `stride`, out [n, num_heads·head_dim]. head_dim ≤ kVitMaxHeadDim.
// Flash-style: one thread per query row and head, keys in shared-memory tiles, online softmax
// (no n×n scores).
absl::Status VitAttention(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
                          int num_heads, int head_dim, float scale, float* out,
                          cudaStream_t stream);

// merged[(i·(grid_w/2) + j), :] = x[2i, 2j] | x[2i, 2j+1] | x[2i+1, 2j] | x[2i+1, 2j+1] (even
// sides): [grid_h/2 · grid_w/2, 4d].
absl::Status VitMergePatches2x2(const float* x, int grid_h, int grid_w, int d, float* merged,
                                cudaStream_t stream);

// GELU in place: the tanh approximation (the encoder's MLP), the exact erf form (the projector).
absl::Status GeluTanh(float* x, int64_t n, cudaStream_t stream);
absl::Status GeluErf(float* x, int64_t n, cudaStream_t stream);

}  // namespace strata::kernels::cuda
