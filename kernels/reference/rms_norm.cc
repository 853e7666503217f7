#include "kernels/reference/rms_norm.h"

#include <cmath>

#include "core/check.h"
#include "kernels/reference/internal/scalar_math.h"

namespace strata::kernels {

void RmsNormReference(const float* x, int64_t rows, int64_t dim, const float* weight, float eps,
                      float* y) {
  CHECK_GE(rows, 0);
  CHECK_GT(dim, 0);
#pragma omp parallel for schedule(static) if (rows * dim > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const double mean_sq = internal::SumSquaresF64(xr, dim) / static_cast<double>(dim);
    const double inv_rms = 1.0 / std::sqrt(mean_sq + static_cast<double>(eps));
    for (int64_t c = 0; c < dim; ++c) {
      const double w = weight != nullptr ? static_cast<double>(weight[c]) : 1.0;
      yr[c] = static_cast<float>(static_cast<double>(xr[c]) * inv_rms * w);
    }
  }
}

}  // namespace strata::kernels
