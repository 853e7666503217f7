// Dense products with int8 weights (`--quantization int8` with `--device cuda`): y = x · Wᵀ in
// gemm.h's nn.Linear layout, W as core/int8_quantize.h stores it:
//
//   codes  [n, k] int8 (−127..127)
//   scales [n, k/32] bf16 bits, one per group of 32 along k
//
// Two paths (GemmInt8UsesGemv):
//   GEMV (decode batches) — a CUDA-core kernel streams the codes once: a CTA of 4 warps holds 4
//     weight rows (2 past 8 activation rows, for registers), the warps split k, each lane takes 16
//     codes (half a group) of each row per step and applies the group's scale to its partial sums,
//     so the weights count exactly (code · scale, f32 math, f32 accumulation in an unspecified
//     order). Taken for m ≤ 8, and for m ≤ 16 unless the tensor-core grid below already gives every
//     SM two CTAs (its 2·m flops a weight make the GEMV compute-bound there; tensor-core tiles on
//     few CTAs stream the weights slower still on a small matrix);
//   tensor cores — GroupedGemm (grouped_gemm.h) with one expert and no offsets table (16- or
//     128-row tiles × 128 columns), each weight dequantised in the load path to bf16(code ·
//     scale).
// The paths differ only by that rounding of the weights (≤ 2^-8 relative each), the size of the
// bf16 rounding of the activations that both take — but they differ: a caller that needs a row's
// result not to depend on the other rows of the call (a prompt computed whole or in pieces)
// passes GemmInt8Path::kTensorCores.
//
// DequantInt8ToBf16 writes the weights as the tensor-core path sees them, for cuBLAS (the MoE
// path through MoeGroupedGemm): dst[r, c] = bf16(code · scale), F32ToBf16 of DecodeInt8, bit for
// bit for finite scales (the quantiser writes no other).
//
// Requirements (InvalidArgument naming the limit otherwise): m ≥ 0, n ≥ 1, k ≥ 32 with
// k % 32 == 0, k < 2^24, n·k < 2^31; x [m, k] and y [m, n] contiguous; x, codes and y 16-byte
// aligned, scales 2-byte aligned; the workspace ≥ Int8GemmWorkspaceBytes(m), 16-byte aligned.
// Asynchronous on `stream`; graph-capturable (no host synchronisation).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace strata::kernels::cuda {

inline constexpr int64_t kInt8GemvAlwaysRows = 8;
inline constexpr int64_t kInt8GemvMaxRows = 16;

enum class GemmInt8Path {
  kAuto,         // GemmInt8UsesGemv decides
  kTensorCores,  // every m: each row's result independent of m
};

// Whether m rows of an n-output product take the GEMV (on the current device's SM count).
bool GemmInt8UsesGemv(int64_t m, int64_t n);

// Device workspace bytes GemmInt8 needs for m rows on `path` (0 where only the GEMV can run;
// enough for either path otherwise).
int64_t GemmInt8WorkspaceBytes(int64_t m, GemmInt8Path path = GemmInt8Path::kAuto);

absl::Status GemmInt8(const uint16_t* x, int64_t m, int64_t k, const int8_t* codes,
                      const uint16_t* scales, int64_t n, float* y, void* workspace,
                      int64_t workspace_bytes, cudaStream_t stream,
                      GemmInt8Path path = GemmInt8Path::kAuto);
absl::Status GemmInt8(const uint16_t* x, int64_t m, int64_t k, const int8_t* codes,
                      const uint16_t* scales, int64_t n, uint16_t* y, void* workspace,
                      int64_t workspace_bytes, cudaStream_t stream,
                      GemmInt8Path path = GemmInt8Path::kAuto);

// rows × cols codes (cols % 32 == 0) → bf16 dst [rows, cols] (4-byte aligned).
absl::Status DequantInt8ToBf16(const int8_t* codes, const uint16_t* scales, int64_t rows,
                               int64_t cols, uint16_t* dst, cudaStream_t stream);

}  // namespace strata::kernels::cuda
