// Int8 weights in groups of 32 with a bf16 scale per group (`--quantization int8`; llama.cpp's
// Q8_0 with a bf16 instead of an f16 scale), along the input (last) dimension:
//
//   codes  [rows, cols]     I8: round(w / s) in [−127, 127] (−128 unused: symmetric)
//   scales [rows, cols/32]  bf16 bits: s, the smallest bf16 with 127·s ≥ the group's largest |w|
//                           (0 for an all-zero group)
//
// A weight decodes to code · s, exact in f32 (a 7-bit integer times an 8-bit significand), so
// every kernel multiplies by the same values as the reference. 8.5 bits a weight (0.53× bf16);
// the error of a value is at most s/2 ≤ amax/254 of its group (RMS ~0.4 % of a Gaussian group's
// RMS), ~4× below FP8-E4M3's at the same size. Used by `--quantization int8` at load.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata {

inline constexpr int kInt8GroupSize = 32;

// The bf16 scale bits of a group whose largest magnitude is `amax` (finite, ≥ 0).
uint16_t Int8ScaleBits(float amax);

// Quantises one row of `cols` values (a multiple of 32) of dtype kF32 or kBF16 (`values` need not
// be aligned) into cols codes and cols/32 scales. Returns false, with the outputs unspecified,
// when a value is infinite or NaN.
bool QuantizeInt8Row(DType dtype, const void* values, int64_t cols, int8_t* codes,
                     uint16_t* scales);

// The inverse: `count` values (a multiple of 32) of one row, code · scale, into dst.
void DecodeInt8(const int8_t* codes, const uint16_t* scales, size_t count, float* dst);

}  // namespace strata
