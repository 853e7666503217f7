// The gated feed-forward shared by dense MLPs, shared experts and routed experts:
// out = down(act(gate(x)) ⊙ up(x)) with act = SiLU (SwiGLU) or SiTU (docs/model.md §6.3). The gate
// and up products and the activation are one fused kernel (kernels/cpu/matmul_glu.h).
#pragma once

#include <cstdint>

#include "engine/linear.h"
#include "engine/model_config.h"
#include "engine/workspace.h"
#include "kernels/reference/glu.h"

namespace strata::engine {

kernels::GluParams GluFromConfig(const ModelConfig& cfg);

// out[num_rows, down.out_features] (overwritten).
void GluFfn(const kernels::GluParams& act, const Linear& gate, const Linear& up, const Linear& down,
            const float* x, int64_t num_rows, float* out, Workspace& ws);

}  // namespace strata::engine
