// Vectorised bulk conversions with run-time ISA dispatch (core/cpu_features.h): the AVX-512
// variant is compiled with a per-function target attribute and only called when the CPU has
// it, so the x86-64-v3 baseline binary never executes an AVX-512 instruction elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"

namespace strata {

// dst[i] = f32(src[i]) for bf16 bits; exact. Uses ActiveIsa().
void Bf16ToF32Rows(const uint16_t* src, size_t count, float* dst);
// The same for an explicit ISA (tests run every path the CPU supports).
void Bf16ToF32RowsIsa(Isa isa, const uint16_t* src, size_t count, float* dst);

// dst[i] = bf16 bits of src[i], rounded to nearest even as F32ToBf16 (core/dtype.h) rounds:
// bit for bit the same, NaNs quieted, subnormals kept (AVX512_BF16's vcvtneps2bf16 would flush
// them, hence integer arithmetic). Uses ActiveIsa().
void F32ToBf16Rows(const float* src, size_t count, uint16_t* dst);
void F32ToBf16RowsIsa(Isa isa, const float* src, size_t count, uint16_t* dst);

}  // namespace strata
