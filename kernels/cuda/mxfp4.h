// MXFP4 → bf16 dequantisation on the GPU, so cuBLAS bf16 GEMMs (MoeGroupedGemm) can run MXFP4
// expert weights from a bf16 scratch copy (core/dtype.h layout, as kernels/cpu/matmul_mxfp4.cc):
//   packed [rows, cols/2] bytes: E2M1 codes, LOW nibble = even element, HIGH nibble = odd;
//   scales [rows, cols/32] E8M0 bytes (2^(s−127); 0xff = NaN, 0 = 2^-127);
//   dst[r, c] = bf16(kE2M1Values[code(r, c)] · 2^(scale[r, c/32] − 127))   (nearest even;
//   the product is exact in f32 and in bf16; a NaN scale gives 0x7fc0 as on the host)
// cols % 32 == 0. Bit-identical to DecodeMxfp4 followed by F32ToBf16.
//
// MoE wiring (caller side, no change to moe.h): expert weights [E, n, k] are E·n rows of k, so
// DequantMxfp4ToBf16(packed, scales, E·n, k, scratch) then MoeGroupedGemm(..., w = scratch, ...)
// on the same stream. The scratch is E·n·k bf16 (per layer, reusable across layers).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace strata::kernels::cuda {

absl::Status DequantMxfp4ToBf16(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                                int64_t cols, uint16_t* dst, cudaStream_t stream);

}  // namespace strata::kernels::cuda
