// Reference matrix products: y[m, n] = x[m, k] · W[n, k]ᵀ (PyTorch nn.Linear layout).
// Activations f32; weights f32, bf16 (raw bits), MXFP4 or int8 groups (decoded row by row, on the
// fly).
// Accumulation in f64 per output element: this is the spec, not the fast path.
#pragma once

#include <cstdint>

namespace strata::kernels {

void MatmulReference(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y);

void MatmulBf16Reference(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                         float* y);

// w_packed: [n, k/2] E2M1 codes, low nibble first; w_scales: [n, k/32] E8M0. k % 32 == 0.
void MatmulMxfp4Reference(const float* x, int64_t m, int64_t k, const uint8_t* w_packed,
                          const uint8_t* w_scales, int64_t n, float* y);

// w_codes: [n, k] int8 codes; w_scales: [n, k/32] bf16 bits (core/int8_quantize.h). k % 32 == 0.
void MatmulInt8Reference(const float* x, int64_t m, int64_t k, const int8_t* w_codes,
                         const uint16_t* w_scales, int64_t n, float* y);

}  // namespace strata::kernels
