// Gated-linear-unit activations of the FFNs (docs/model.md §6.3), f32, elementwise:
//   SwiGLU:   out = SiLU(gate) ⊙ up
//   SiTU-GLU: out = [β1·tanh(gate/β1)·σ(gate)] ⊙ [β2·tanh(up/β2)]   (β2 ≤ 0 or absent: up uncapped)
// gate, up, out: n elements; out may alias gate or up.
#pragma once

#include <cstdint>

namespace strata::kernels {

enum class GluKind { kSwiGlu, kSitu };

struct GluParams {
  GluKind kind = GluKind::kSwiGlu;
  float beta1 = 4.0f;  // SiTU gate cap
  float beta2 = 0.0f;  // SiTU up cap; ≤ 0 means no cap
};

void GluReference(const float* gate, const float* up, int64_t n, const GluParams& params,
                  float* out);

}  // namespace strata::kernels
