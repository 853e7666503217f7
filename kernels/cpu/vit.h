// Fast CPU kernels of the vision tower (MoonViT-V2, docs/vision.md); each matches its reference
// in kernels/reference/vit.h (same layouts and contracts) to f32 rounding.
//
// VitAttention is non-causal attention over one image's n patches with O(n · head_dim) memory
// (no n × n buffer): per head, K and V are packed once side by side, then every 32 queries attend
// them on the MLA prefill's lane tiles (mla_tiles.h: queries one per vector lane, a lane-wise
// online softmax in base 2). Under STRATA_ISA=scalar: two matmul products per tile of query rows
// with an exact softmax between them.
#pragma once

#include <cstdint>
#include <vector>

namespace strata::kernels::cpu {

// cos / sin of the 2-D rotary angles of one grid, computed once per image (f64, then rounded).
struct Rope2dTable {
  int grid_h = 0, grid_w = 0, head_dim = 0;
  std::vector<float> row_cos, row_sin;  // [grid_h, head_dim / 4]: row · f_i
  std::vector<float> col_cos, col_sin;  // [grid_w, head_dim / 4]: column · f_i
};
Rope2dTable MakeRope2dTable(int grid_h, int grid_w, int head_dim, float theta);

// As reference::Rope2d, with the table's angles.
void Rope2d(const Rope2dTable& table, float* x, int64_t stride, int num_heads);

// As reference::AddBilinearPositions.
void AddBilinearPositions(const float* table, int in_h, int in_w, int d, int out_h, int out_w,
                          float* x);

// As reference::VitAttention.
void VitAttention(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
                  int num_heads, int head_dim, float scale, float* out);

// As reference::GeluTanh / GeluErf (std::tanh / std::erf in f32).
void GeluTanh(float* x, int64_t n);
void GeluErf(float* x, int64_t n);

}  // namespace strata::kernels::cpu
