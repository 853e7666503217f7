#include "kernels/reference/kda_decode.h"

#include <cmath>
#include <vector>

#include "core/check.h"

namespace strata::kernels {

// Per head, the state is held in f64 for the whole call (S[i][j], i key, j value) and rounded to
// f32 once at the end; every reduction (Sᵀk, Sᵀq) is f64.
void KdaRecurrentReference(const float* q, const float* k, const float* v, const float* g,
                           const float* beta, int64_t num_tokens, int num_heads, int head_dim,
                           float* state, float* o) {
  CHECK_GE(num_tokens, 0);
  CHECK_GT(num_heads, 0);
  CHECK_GT(head_dim, 0);
  const int64_t d = head_dim;
  const int64_t width = num_heads * d;
#pragma omp parallel for schedule(static) if (num_heads > 1 && num_tokens * d * d > (1 << 14))
  for (int h = 0; h < num_heads; ++h) {
    float* state_h = state + h * d * d;
    std::vector<double> s(state_h, state_h + d * d);
    std::vector<double> e(static_cast<size_t>(d));
    std::vector<double> out(static_cast<size_t>(d));
    for (int64_t t = 0; t < num_tokens; ++t) {
      const int64_t base = t * width + h * d;
      const float* qt = q + base;
      const float* kt = k + base;
      const float* vt = v + base;
      const float* gt = g + base;
      const double bt = beta[t * num_heads + h];
      // S ← diag(exp(g_t)) S
      for (int64_t i = 0; i < d; ++i) {
        const double alpha = std::exp(static_cast<double>(gt[i]));
        for (int64_t j = 0; j < d; ++j) {
          s[i * d + j] *= alpha;
        }
      }
      // e = v_t − Sᵀ k_t
      for (int64_t j = 0; j < d; ++j) {
        e[j] = vt[j];
      }
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t j = 0; j < d; ++j) {
          e[j] -= s[i * d + j] * kt[i];
        }
      }
      // S ← S + β_t k_t eᵀ
      for (int64_t i = 0; i < d; ++i) {
        const double bk = bt * kt[i];
        for (int64_t j = 0; j < d; ++j) {
          s[i * d + j] += bk * e[j];
        }
      }
      // o_t = Sᵀ q_t
      for (int64_t j = 0; j < d; ++j) {
        out[j] = 0.0;
      }
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t j = 0; j < d; ++j) {
          out[j] += s[i * d + j] * qt[i];
        }
      }
      for (int64_t j = 0; j < d; ++j) {
        o[base + j] = static_cast<float>(out[j]);
      }
    }
    for (int64_t p = 0; p < d * d; ++p) {
      state_h[p] = static_cast<float>(s[p]);
    }
  }
}

}  // namespace strata::kernels
