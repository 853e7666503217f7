// Fused gate/up product of a gated FFN (docs/model.md §6.3):
//   h[m, n] = act(x · W1ᵀ)[m, n] ⊙ cap(x · W3ᵀ)[m, n]
// act/cap = SiLU/identity (SwiGLU) or the SiTU caps (kernels/reference/glu.h GluParams).
//
// Each register tile takes nr/2 rows of W1 and the same rows of W3 (internal/matmul_driver.h,
// "paired"), so one pass over x feeds both products and both weight streams are read once; the
// two sums of a column meet in a small per-task buffer and the activation runs on them there
// (internal/glu_act.h) — g and u are never written out. Weights f32 / bf16 / MXFP4 as in
// Matmul(), same tiles, same accumulation order: x·W1ᵀ and x·W3ᵀ here are bit-identical to
// Matmul() of each, so row i of a batch is bit-identical to the row alone and the thread count
// does not change results. They depend on the ISA path (AVX-512 / AVX2; scalar = reference).
//
// Thread-safety: as Matmul(). Steady state allocates nothing.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/reference/glu.h"

namespace strata::kernels::cpu {

// gate and up: the same format, n and k. h [m, gate.n] must not alias x.
void MatmulGlu(const MatmulWeights& gate, const MatmulWeights& up, const GluParams& act,
               const float* x, int64_t m, float* h);

// One fused product of a batch of independent ones (e.g. the routed experts of a MoE layer):
// h[i, :] = act(x_r · W1ᵀ) ⊙ cap(x_r · W3ᵀ) with x_r = x + (rows ? rows[i] : i) · gate.k.
struct GluGroup {
  MatmulWeights gate, up;
  const float* x = nullptr;
  const int64_t* rows = nullptr;  // null: rows 0 .. m − 1 of x
  int64_t m = 0;
  float* h = nullptr;  // [m, gate.n]
};

// Every group's product, all in one parallel region (tasks = group × row chunk × W1/W3 rows),
// so many small products (decode: a few rows per expert) keep every thread busy without one
// fork/join each. Groups may differ in format and shape. Results equal MatmulGlu per group.
void MatmulGluGrouped(const GluGroup* groups, int64_t num_groups, const GluParams& act);

}  // namespace strata::kernels::cpu
