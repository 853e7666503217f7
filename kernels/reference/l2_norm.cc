#include "kernels/reference/l2_norm.h"

#include <cmath>

#include "core/check.h"
#include "kernels/reference/internal/scalar_math.h"

namespace strata::kernels {

void L2NormReference(const float* x, int64_t rows, int64_t dim, float eps, float scale, float* y) {
  CHECK_GE(rows, 0);
  CHECK_GT(dim, 0);
#pragma omp parallel for schedule(static) if (rows * dim > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const double factor = static_cast<double>(scale) /
                          std::sqrt(internal::SumSquaresF64(xr, dim) + static_cast<double>(eps));
    for (int64_t c = 0; c < dim; ++c) {
      yr[c] = static_cast<float>(static_cast<double>(xr[c]) * factor);
    }
  }
}

}  // namespace strata::kernels
