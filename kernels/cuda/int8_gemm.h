// Dense products with int8 weights (`--quantization int8` with `--device cuda`): y = x · Wᵀ in
// gemm.h's nn.Linear layout, W as core/int8_quantize.h stores it:
//
//   codes  [n, k] int8 (−127..127)
//   scales [n, k/32] bf16 bits, one per group of 32 along k
//
// Three paths (GemmInt8PathFor picks for kAuto):
//   GEMV (kGemv; kAuto at one row) — a CUDA-core kernel streams the codes once: a CTA of 4 warps
//     holds 4 weight rows (2 past 8 activation rows, for registers), the warps split k, each lane
//     takes 16 codes (half a group) of each row per step and applies the group's scale to its
//     partial sums, so the weights count exactly (code · scale, f32 math, f32 accumulation in an
//     unspecified order). m ≤ 16. The H200 measured it at 35 % of copy at one row and 9 % at
//     eight (each row's multiply-adds and activation conversions on the CUDA cores);
//   skinny (kSkinny; kAuto at 2–16 rows) — tensor cores at decode sizes: a CTA of 4 warps holds
//     16 weight rows (two n8 mma tiles), the warps split k in four contiguous ranges, and each
//     lane loads its codes and the activations straight from global memory (4 groups in flight)
//     and decodes the codes in registers into the mma B fragments (bf16(code · scale), as below);
//     the activation rows (≤ 16, zero past m) are the A fragments; the warps' partial sums add
//     in shared memory in a fixed order. No workspace. A row's result does not depend on m;
//   tensor cores (kTensorCores; kAuto past 16 rows) — GroupedGemm (grouped_gemm.h) with one
//     expert and no offsets table (16- or 128-row tiles × 128 columns), each weight decoded to
//     bf16(code · scale) in registers.
// The paths differ by that rounding of the weights (≤ 2^-8 relative each; not the GEMV's) and by
// the order of the k sum: a caller that needs a row's result not to depend on the other rows of
// the call (a prompt computed whole or in pieces) passes GemmInt8Path::kTensorCores.
//
// DequantInt8ToBf16 writes the weights as the tensor-core path sees them, for cuBLAS (the MoE
// path through MoeGroupedGemm): dst[r, c] = bf16(code · scale), F32ToBf16 of DecodeInt8, bit for
// bit for finite scales (the quantiser writes no other).
//
// Requirements (InvalidArgument naming the limit otherwise): m ≥ 0, n ≥ 1, k ≥ 32 with
// k % 32 == 0, k < 2^24, n·k < 2^31; m ≤ 16 on kGemv and kSkinny; x [m, k] and y [m, n]
// contiguous; x, codes and y 16-byte aligned, scales 2-byte aligned; the workspace ≥
// GemmInt8WorkspaceBytes(m, path), 16-byte aligned.
// Asynchronous on `stream`; graph-capturable (no host synchronisation).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace strata::kernels::cuda {

inline constexpr int64_t kInt8GemvMaxRows = 16;  // GEMV and skinny paths: m ≤ 16

enum class GemmInt8Path {
  kAuto,         // GemmInt8PathFor decides
  kTensorCores,  // every m: each row's result independent of m
  kGemv,         // m ≤ 16 (CUDA cores, exact weights)
  kSkinny,       // m ≤ 16 (tensor cores, weights decoded in registers)
};

// The path kAuto takes for m rows: kGemv at 1, kSkinny at 2–16, kTensorCores past 16.
GemmInt8Path GemmInt8PathFor(int64_t m);

// Device workspace bytes GemmInt8 needs for m rows on `path` (0 where it takes the GEMV or the
// skinny path).
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
