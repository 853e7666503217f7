// Reference encoding and decoding of one MLA latent row in a cache format (core/latent_row.h):
// the spec in code for the fast CPU codec (kernels/cpu/latent_codec.h) and the CUDA cache
// writes and reads. Scalar, written for clarity: fp8 codes come from core's exhaustive
// nearest-value search (F32ToF8E4M3), bf16 from core's round-to-nearest-even.
#pragma once

#include <cstdint>

#include "core/latent_row.h"

namespace strata::kernels {

// The fp8 scale of one group of 128 values: max|x| / 448, or 1 when the group is all zeros.
float Fp8GroupScaleReference(const float* x, int64_t n);

// dst (LatentBytesPerToken(dtype, latent_dim, rope_dim) bytes, any alignment) = `row`
// (latent_dim floats, the last rope_dim of them the rope part) encoded.
void EncodeLatentRowReference(LatentDType dtype, const float* row, int32_t latent_dim,
                              int32_t rope_dim, void* dst);

// row (latent_dim floats) = the values `src` stores (fp8: code · scale, one f32 rounding).
void DecodeLatentRowReference(LatentDType dtype, const void* src, int32_t latent_dim,
                              int32_t rope_dim, float* row);

}  // namespace strata::kernels
