#include "kernels/reference/kda_gate.h"

#include <cmath>

#include "core/check.h"
#include "kernels/reference/internal/scalar_math.h"

namespace strata::kernels {

void KdaGateReference(const float* f, int64_t num_tokens, int num_heads, int head_dim,
                      const float* a_log, const float* dt_bias, bool has_lower_bound,
                      float lower_bound, float* g) {
  CHECK_GE(num_tokens, 0);
  CHECK_GT(num_heads, 0);
  CHECK_GT(head_dim, 0);
  if (has_lower_bound) {
    CHECK_LT(lower_bound, 0.0f) << "the K3 gate needs a negative lower bound";
  }
  const int64_t width = static_cast<int64_t>(num_heads) * head_dim;
#pragma omp parallel for schedule(static) if (num_tokens * width > (1 << 15))
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < num_heads; ++h) {
      const double a = std::exp(static_cast<double>(a_log[h]));
      for (int c = 0; c < head_dim; ++c) {
        const int64_t idx = static_cast<int64_t>(h) * head_dim + c;
        const double z = static_cast<double>(f[t * width + idx]) + dt_bias[idx];
        const double value =
            has_lower_bound ? lower_bound * internal::Sigmoid(a * z) : -a * internal::Softplus(z);
        g[t * width + idx] = static_cast<float>(value);
      }
    }
  }
}

void SigmoidReference(const float* x, int64_t n, float* y) {
  CHECK_GE(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<float>(internal::Sigmoid(x[i]));
  }
}

}  // namespace strata::kernels
