#include "kernels/reference/attn_res.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/reference/internal/scalar_math.h"

namespace strata::kernels {

void AttnResMixReference(const float* const* sources, int num_sources, int64_t num_tokens,
                         int64_t dim, const float* w_norm, const float* w_proj, float eps,
                         float* out) {
  CHECK_GE(num_sources, 1);
  CHECK_GE(num_tokens, 0);
  CHECK_GT(dim, 0);
  std::vector<float> w_eff(static_cast<size_t>(dim));  // w_norm ⊙ w_proj, rounded to f32
  for (int64_t c = 0; c < dim; ++c) {
    w_eff[c] = w_norm[c] * w_proj[c];
  }
#pragma omp parallel for schedule(static) if (num_tokens * dim * num_sources > (1 << 15))
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<double> z(static_cast<size_t>(num_sources));
    for (int i = 0; i < num_sources; ++i) {
      const float* v = sources[i] + t * dim;
      const double mean_sq = internal::SumSquaresF64(v, dim) / static_cast<double>(dim);
      z[i] = internal::DotF64(w_eff.data(), v, dim) / std::sqrt(mean_sq + eps);
    }
    const double z_max = *std::max_element(z.begin(), z.end());
    double denom = 0.0;
    for (double& zi : z) {
      zi = std::exp(zi - z_max);
      denom += zi;
    }
    for (int64_t c = 0; c < dim; ++c) {
      double acc = 0.0;
      for (int i = 0; i < num_sources; ++i) {
        acc += z[i] * sources[i][t * dim + c];
      }
      out[t * dim + c] = static_cast<float>(acc / denom);
    }
  }
}

}  // namespace strata::kernels
