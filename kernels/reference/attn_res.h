// Block Attention Residuals mix (docs/model.md §5.1), per token, f32:
//   w_eff = w_norm ⊙ w_proj
//   z_i = (w_eff · v_i) / sqrt(mean(v_i²) + eps)
//   out = Σ_i softmax(z)_i · v_i        (the RAW sources are mixed)
// sources: num_sources pointers to [T, d] arrays; out: [T, d] (may alias none of the sources).
#pragma once

#include <cstdint>

namespace strata::kernels {

void AttnResMixReference(const float* const* sources, int num_sources, int64_t num_tokens,
                         int64_t dim, const float* w_norm, const float* w_proj, float eps,
                         float* out);

}  // namespace strata::kernels
