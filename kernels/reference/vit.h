// Reference kernels of the vision tower (MoonViT-V2, docs/vision.md): plain loops with f64
// sums, the spec the fast kernels (kernels/cpu/vit.h) are checked against.
//
// Layouts: a token matrix is [n, stride] f32, row p = the patch at grid (p / grid_w, p % grid_w);
// attention heads take columns [h·head_dim, (h + 1)·head_dim) of q, k, v and out.
#pragma once

#include <cstdint>

namespace strata::kernels::reference {

// x[r·out_w + c, :] += the position table [in_h, in_w, d] resized to [out_h, out_w] bilinearly
// (PyTorch's F.interpolate, align_corners false, no antialias: source coordinate
// (i + 0.5) · in / out − 0.5 clamped at 0, neighbours clamped to the edge).
void AddBilinearPositions(const float* table, int in_h, int in_w, int d, int out_h, int out_w,
                          float* x);

// 2-D rotary embedding, in place, on every head of every row: for i < head_dim / 4 with
// f_i = theta^(−4i / head_dim), dims (4i, 4i+1) rotate by column·f_i and dims (4i+2, 4i+3) by
// row·f_i; (a, b) → (a·cos − b·sin, a·sin + b·cos).
void Rope2d(float* x, int64_t stride, int grid_h, int grid_w, int num_heads, int head_dim,
            float theta);

// out[p, h] = softmax_j(q[p, h] · k[j, h] · scale) · v[j, h] over all n rows (non-causal).
// q, k, v have row stride `stride`; out is [n, num_heads·head_dim].
void VitAttention(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
                  int num_heads, int head_dim, float scale, float* out);

// merged[(i·(grid_w/2) + j), :] = concat(x[2i, 2j], x[2i, 2j+1], x[2i+1, 2j], x[2i+1, 2j+1])
// for x [grid_h·grid_w, d] (grid sides even): [grid_h/2 · grid_w/2, 4d].
void MergePatches2x2(const float* x, int grid_h, int grid_w, int d, float* merged);

// GELU, tanh approximation (the encoder's MLP) and exact erf form (the projector), in place.
void GeluTanh(float* x, int64_t n);
void GeluErf(float* x, int64_t n);

}  // namespace strata::kernels::reference
