// KDA per-channel log-decay gate g (docs/model.md §3.2), f32 math.
//
//   Kimi-Linear (no lower bound): g = −exp(A_log[h]) · softplus(f + dt_bias[h·D + c])
//   K3 (lower_bound lb < 0):      g = lb · sigmoid(exp(A_log[h]) · (f + dt_bias[h·D + c]))
//
// f: [T, H·D] (f_b_proj(f_a_proj x)); a_log: [H] (only the first H entries are used);
// dt_bias: [H·D]; g: [T, H·D]. `has_lower_bound` selects the K3 form.
#pragma once

#include <cstdint>

namespace strata::kernels {

void KdaGateReference(const float* f, int64_t num_tokens, int num_heads, int head_dim,
                      const float* a_log, const float* dt_bias, bool has_lower_bound,
                      float lower_bound, float* g);

// β = sigmoid(b): [T, H], elementwise. Also used for the sigmoid output gates.
void SigmoidReference(const float* x, int64_t n, float* y);

}  // namespace strata::kernels
