// KDA causal depthwise short convolution followed by SiLU, with a carried conv cache.
//
//   y_t[c] = SiLU( Σ_{j=0}^{K-1} w[c, j] · x_{t-K+1+j}[c] )
//
// x: [T, C] pre-conv inputs; w: [C, K] (index K-1 multiplies the current token);
// conv_state: [K-1, C], the last K-1 pre-conv inputs before x (oldest first; zeros for a new
// sequence). On return conv_state holds the last K-1 pre-conv inputs including x.
// y: [T, C]; must not alias x.
#pragma once

#include <cstdint>

namespace strata::kernels {

void ShortConvSiluReference(const float* x, int64_t num_tokens, int64_t channels, const float* w,
                            int kernel_size, float* conv_state, float* y);

}  // namespace strata::kernels
