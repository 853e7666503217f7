// The GLU epilogue of the fused gate/up product (kernels/cpu/matmul_glu.h), vectorised:
//   out[i] = act(g[i]) · cap2(u[i]),  i < n
//   SwiGLU: act(g) = g·σ(g),  cap2(u) = u
//   SiTU:   act(g) = β1·tanh(g/β1)·σ(g),  cap2(u) = β2·tanh(u/β2) (β2 ≤ 0: u)
// exp and tanh are f32 polynomial approximations (Cephes expf / tanhf: ≤ 2–3 ulp over the
// range that matters; exp's argument is clamped to [−87.3, 88], which only moves results that
// are already 0 or 1 to within 1e-38). Elementwise: a value does not depend on n or on its
// position, so batching and the thread count cannot change it.
#pragma once

#include <cstdint>

#include "kernels/reference/glu.h"

namespace strata::kernels::cpu::internal {

using GluActFn = void (*)(const float* g, const float* u, int64_t n, const GluParams& params,
                          float* out);

void GluActAvx512(const float* g, const float* u, int64_t n, const GluParams& params, float* out);
void GluActAvx2(const float* g, const float* u, int64_t n, const GluParams& params, float* out);

}  // namespace strata::kernels::cpu::internal
