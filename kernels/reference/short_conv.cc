#include "kernels/reference/short_conv.h"

#include <vector>

#include "core/check.h"
#include "kernels/reference/internal/scalar_math.h"

namespace strata::kernels {

// Works on the virtual sequence [conv_state (K−1 rows) ; x (T rows)], so token t's window is
// rows t .. t+K−1 of it. The new conv_state is its last K−1 rows.
void ShortConvSiluReference(const float* x, int64_t num_tokens, int64_t channels, const float* w,
                            int kernel_size, float* conv_state, float* y) {
  CHECK_GE(num_tokens, 0);
  CHECK_GT(channels, 0);
  CHECK_GE(kernel_size, 1);
  const int64_t history = kernel_size - 1;
  auto row = [&](int64_t v) -> const float* {  // row v of the virtual sequence
    return v < history ? conv_state + v * channels : x + (v - history) * channels;
  };
#pragma omp parallel for schedule(static) if (num_tokens * channels > (1 << 16))
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      double acc = 0.0;
      for (int j = 0; j < kernel_size; ++j) {
        acc += static_cast<double>(w[c * kernel_size + j]) * row(t + j)[c];
      }
      y[t * channels + c] = static_cast<float>(internal::Silu(acc));
    }
  }
  // New state = rows T .. T+K−2 of the virtual sequence (copied first: they may overlap the old).
  std::vector<float> next(static_cast<size_t>(history * channels));
  for (int64_t v = 0; v < history; ++v) {
    const float* src = row(num_tokens + v);
    for (int64_t c = 0; c < channels; ++c) {
      next[v * channels + c] = src[c];
    }
  }
  for (size_t i = 0; i < next.size(); ++i) {
    conv_state[i] = next[i];
  }
}

}  // namespace strata::kernels
