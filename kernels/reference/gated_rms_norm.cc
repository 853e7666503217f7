#include "kernels/reference/gated_rms_norm.h"

#include <cmath>

#include "core/check.h"
#include "kernels/reference/internal/scalar_math.h"

namespace strata::kernels {

void GatedRmsNormReference(const float* o, const float* gate, int64_t num_tokens, int num_heads,
                           int head_dim, const float* weight, float eps, float* y) {
  CHECK_GE(num_tokens, 0);
  CHECK_GT(num_heads, 0);
  CHECK_GT(head_dim, 0);
  const int64_t rows = num_tokens * num_heads;  // one row = one (token, head) pair
#pragma omp parallel for schedule(static) if (rows * head_dim > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const float* orow = o + r * head_dim;
    const float* grow = gate + r * head_dim;
    float* yrow = y + r * head_dim;
    const double mean_sq = internal::SumSquaresF64(orow, head_dim) / head_dim;
    const double inv_rms = 1.0 / std::sqrt(mean_sq + static_cast<double>(eps));
    for (int c = 0; c < head_dim; ++c) {
      const double normed = static_cast<double>(orow[c]) * inv_rms * weight[c];
      yrow[c] = static_cast<float>(normed * internal::Sigmoid(grow[c]));
    }
  }
}

}  // namespace strata::kernels
