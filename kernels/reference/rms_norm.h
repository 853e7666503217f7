// RMSNorm over the last dimension of row-major [rows, dim] data.
#pragma once

#include <cstdint>

namespace strata::kernels {

// y = x / sqrt(mean(x²) + eps) ⊙ weight   (weight may be null: no scale). y may alias x.
void RmsNormReference(const float* x, int64_t rows, int64_t dim, const float* weight, float eps,
                      float* y);

}  // namespace strata::kernels
