// The second half of a MoE layer's experts: each expert's down product, weighted and added into
// the rows its tokens came from, for all experts in one parallel region:
//   for g in order:  y[rows_g[i], :] = fma(scale_g[i], (x_g · W_gᵀ)[i, :], y[rows_g[i], :])
// Tasks are blocks of y's columns (W rows) spanning every group, so no two threads ever add to
// the same element, and each element sees the groups in the given order: the result does not
// depend on the thread count (and a row's result does not depend on the other rows). Each
// group's weight rows of a block are read once per task; x·Wᵀ is computed exactly as Matmul()
// computes it.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace strata::kernels::cpu {

struct ScatterAddGroup {
  MatmulWeights w;           // [n, k]; every group has the same n
  const float* x = nullptr;  // [m, k], contiguous rows
  int64_t m = 0;
  const int64_t* rows = nullptr;  // y row of x row i; null: row i
  const float* scale = nullptr;   // per x row; null: 1
};

// y [*, n] (row stride n) is added to, never overwritten.
void MatmulScatterAddGrouped(const ScatterAddGroup* groups, int64_t num_groups, int64_t n,
                             float* y);

}  // namespace strata::kernels::cpu
