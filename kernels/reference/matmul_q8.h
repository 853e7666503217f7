// Reference products with the activations rounded to int8 (MatmulPrecision::kInt8's products
// for MXFP4 and int8 weights, kernels/cpu/matmul_vnni.cc): llama.cpp's Q8_0 activations with an
// f32 scale.
//
// A row of x is cut into 32-element blocks; block b keeps
//   sx_b = amax_b / 127 (f32),   q_e = round-to-nearest-even(x_e · (127 / amax_b)) in [−127, 127]
// (f32 products; a block of zeros, or one so small that 127 / amax_b overflows (amax_b below
// ~3.7e-37): sx_b = 0, codes 0; a block holding an infinity or a NaN: sx_b = NaN, codes 0, so
// every output of the row is NaN as in the exact products). Each code
// keeps 8 significant bits of its block's largest value: |x_e − q_e·sx_b| ≤ sx_b / 2.
// y[i, j] = Σ_b sx_b · Σ_{e in b} q_e · w_e with the weights decoded exactly, summed in f64.
#pragma once

#include <cstdint>

namespace strata::kernels {

inline constexpr int64_t kQ8BlockSize = 32;

// One row of k values (k % 32 == 0) into k codes and k/32 scales.
void QuantizeQ8Reference(const float* x, int64_t k, int8_t* codes, float* scales);

// As MatmulMxfp4Reference / MatmulInt8Reference (kernels/reference/matmul.h) with x rounded.
void MatmulMxfp4Q8Reference(const float* x, int64_t m, int64_t k, const uint8_t* w_packed,
                            const uint8_t* w_scales, int64_t n, float* y);
void MatmulInt8Q8Reference(const float* x, int64_t m, int64_t k, const int8_t* w_codes,
                           const uint16_t* w_scales, int64_t n, float* y);

}  // namespace strata::kernels
