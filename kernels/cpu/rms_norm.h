// RMSNorm over the last dimension of row-major [rows, dim] f32 data (docs/model.md §1), alone or
// fused with the residual add that precedes it. AVX-512 or AVX2 by ActiveIsa()
// (STRATA_ISA=scalar: kernels/reference). f32 accumulation (rows are ≤ a few 10⁴ wide: the
// relative error stays ~1e-6); rows are independent and OpenMP-parallel when large. No heap
// allocation.
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

// y = x / sqrt(mean(x²) + eps) ⊙ weight   (weight may be null: no scale). y may alias x.
void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y);

// h += a; y = RmsNorm(h) (the add and the sum of squares share one pass over h). y may alias
// a but not h.
void AddRmsNorm(float* h, const float* a, int64_t rows, int64_t dim, const float* weight, float eps,
                float* y);

}  // namespace strata::kernels::cpu
