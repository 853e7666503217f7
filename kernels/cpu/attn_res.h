// Block AttnRes mix (docs/model.md §5.1) over n sources, per token, f32:
//   w_eff = w_norm ⊙ w_proj
//   z_i   = (w_eff · v_i) / sqrt(mean(v_i²) + eps)
//   out   = Σ_i softmax(z)_i · v_i          (the RAW sources are mixed)
// AVX-512 or AVX2 by ActiveIsa() (STRATA_ISA=scalar: kernels/reference). One pass over each
// source for its dot product and sum of squares, one for the weighted sum; z and the softmax in
// f64. Tokens are OpenMP-parallel when the work is large. No heap allocation.
#pragma once

#include <cstdint>

#include "absl/types/span.h"

namespace strata::kernels::cpu {

inline constexpr int kMaxAttnResSources = 128;

// sources: 1..kMaxAttnResSources pointers to [num_tokens, dim] arrays; out [num_tokens, dim]
// must alias none of them.
void AttnResMix(absl::Span<const float* const> sources, int64_t num_tokens, int64_t dim,
                const float* w_norm, const float* w_proj, float eps, float* out);

}  // namespace strata::kernels::cpu
