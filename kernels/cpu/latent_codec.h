// The latent cache row formats (core/latent_row.h) on the CPU: encoding a row as the MLA layer
// writes it, decoding rows as the attention kernels read them. Bit-identical to the reference
// codec (kernels/reference/latent_codec.h): decoding is exact up to the one f32 rounding of
// code · scale, which both do the same way, so attention over a bf16/fp8 cache equals attention
// over an f32 cache holding the decoded values, bit for bit.
//
// Decoding is AVX2 (the build's baseline): 8 values per instruction, a few ns per 576-wide row,
// small next to the ~H · 2 · 1088 FLOPs each row costs the attention that reads it.
#pragma once

#include <cstdint>

#include "core/latent_row.h"

namespace strata::kernels::cpu {

// dst (LatentBytesPerToken(dtype, latent_dim, rope_dim) bytes, any alignment) = `row`
// (latent_dim floats) encoded.
void EncodeLatentRow(LatentDType dtype, const float* row, int32_t latent_dim, int32_t rope_dim,
                     void* dst);

// row (latent_dim floats) = the values `src` (one encoded row, any alignment) stores.
void DecodeLatentRow(LatentDType dtype, const void* src, int32_t latent_dim, int32_t rope_dim,
                     float* row);

// e4m3 code of `value` (round to nearest even, saturating to ±448, NaN → 0x7F) by bit
// arithmetic; equals core's F32ToF8E4M3 for every input. Exposed for tests.
uint8_t F32ToE4M3Fast(float value);

}  // namespace strata::kernels::cpu
