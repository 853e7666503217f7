// L2 normalisation over the last dimension of row-major [rows, dim] data.
#pragma once

#include <cstdint>

namespace strata::kernels {

// y = scale · x / sqrt(Σ x² + eps)   (KDA q/k: eps 1e-6, scale D^-1/2 for q, 1 for k).
// y may alias x.
void L2NormReference(const float* x, int64_t rows, int64_t dim, float eps, float scale, float* y);

}  // namespace strata::kernels
