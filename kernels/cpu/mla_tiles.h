// The register-tile building blocks behind the MLA attention kernels (mla_decode.h,
// mla_prefill.h), one set per ISA. Internal to kernels/cpu.
//
// Every output element is produced by the same instruction sequence whatever the tile shape,
// the number of queries processed together or the thread doing it (tails are padded, never
// computed by a different loop), so a sequence's result does not depend on the batch it is in.
//
// Online softmax over one tile of context rows (flash attention, MQA form), for n queries that
// share the rows (the heads of one sequence, or heads × tokens in prefill):
//
//   rows (≤ kTileRows pointers into the page pool, each lat_w = r + dr floats):
//     s[i, j]   = scale · q̃_i · κ_j                        (Dots, j < kTileRows)
//     m'_i      = max(m_i, max_j s[i, j])    α_i = exp(m_i − m'_i)
//     p[i, j]   = exp(s[i, j] − m'_i)        l_i ← α_i · l_i + Σ_j p[i, j]
//     acc[i, :] ← α_i · acc[i, :] + Σ_j p[i, j] · c_j[0, r)   (Axpy)
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/reference/mla.h"

namespace strata::kernels::cpu::mla {

inline constexpr int kTileRows = 16;    // context rows per tile: one AVX-512 vector of scores
inline constexpr int kMaxQueries = 64;  // queries per AttendTile call (stack-sized scratch)

// Online-softmax state of a block of queries (all pointers owned by the caller).
struct QueryBlock {
  const float* q = nullptr;          // [n, q_stride] absorbed queries q̃ (lat_w wide, unscaled)
  int64_t q_stride = 0;              // floats
  float* acc = nullptr;              // [n, acc_stride] unnormalised Σ p_j c_j (r wide)
  int64_t acc_stride = 0;            // floats
  float* max = nullptr;              // [n] running max of the scaled scores (−inf: no row yet)
  float* sum = nullptr;              // [n] running Σ exp(s − max)
  const int64_t* limit = nullptr;    // [n] query i sees rows with index < limit[i]; nullptr: all
  int n = 0;                         // ≤ kMaxQueries
  const uint16_t* q_bf16 = nullptr;  // attend_tile_bf16: the queries rounded to bf16 (q_stride)
};

// Online-softmax state of kLaneQueries queries held one per vector lane ("transposed", as a
// GPU score tile holds them): the softmax of a tile needs no horizontal reduction, and each
// score or value product is one multiply-add per lane with the row's value broadcast, so narrow
// heads (the long-context test model's 24-wide keys) run as fast per FLOP as wide ones.
inline constexpr int kLaneQueries = 32;
inline constexpr int kLaneTileRows = 32;  // context rows per attend_lanes call (at most)

struct LaneBlock {
  const float* qt = nullptr;  // [key_width][kLaneQueries] the queries transposed (unscaled)
  float* acc = nullptr;       // [value_width][kLaneQueries] unnormalised Σ p·v, transposed
  float* max = nullptr;       // [kLaneQueries] running max of the scores in base 2
                              // (scale · log₂e · q·k; −inf: no row yet)
  float* sum = nullptr;       // [kLaneQueries] running Σ 2^(s − max)
  // Lane i sees rows with index < min_limit + limit[i]; min_limit ≤ every lane's limit, so rows
  // below it need no causal mask, and limit[i] (≥ 0, small: stored as f32) is exact.
  const float* limit = nullptr;  // [kLaneQueries]
  int64_t min_limit = 0;
};

struct TileKernels {
  // out[i][j] = Σ_{k < width} a[i][k] · b[j][k] for i < na, j < nb (any sizes).
  void (*dots)(const float* const* a, int na, const float* const* b, int nb, int width,
               float* const* out);
  // out[i][c] = (init ? init[i] · out[i][c] : 0) + Σ_{j < nsrc} coef[i][j] · src[j][c],
  // c < width, i < n (any n), j in order. nsrc ≤ kMaxSources.
  void (*axpy)(float* const* out, int n, const float* init, const float* const* coef,
               const float* const* src, int nsrc, int width);
  // One online-softmax step of `qb` over rows[0, num_rows) (num_rows in [1, kTileRows]); row
  // index of rows[0] is row0 (for the causal limits). Keys are rows[j][0, key_width), values
  // rows[j][value_offset, value_offset + value_width): absorbed form (576, 0, 512) on latent
  // rows, expanded form (dn + dr, dn + dr, dv) on [k_nope ; k_pe ; v] rows.
  void (*attend_tile)(const QueryBlock& qb, const float* const* rows, int num_rows, int64_t row0,
                      int key_width, int value_offset, int value_width, float scale);
  // o[c] *= sigmoid(g[c]) for c < n.
  void (*gate)(float* o, const float* g, int64_t n);
  // attend_tile over bf16 rows (a bf16 latent cache read in place) with qb.q_bf16 as the queries:
  // vdpbf16ps products, P rounded to bf16 (mla_tiles_bf16_impl.h). nullptr where the ISA has no
  // AVX512-BF16.
  void (*attend_tile_bf16)(const QueryBlock& qb, const uint16_t* const* rows, int num_rows,
                           int64_t row0, int key_width, int value_offset, int value_width,
                           float scale) = nullptr;
  // dots and axpy with bf16 `b` / `src` rows (weights kept in the checkpoint's bf16), widened
  // exactly: bit-identical to dots / axpy over the same values in f32.
  void (*dots_bf16w)(const float* const* a, int na, const uint16_t* const* b, int nb, int width,
                     float* const* out) = nullptr;
  void (*axpy_bf16w)(float* const* out, int n, const float* init, const float* const* coef,
                     const uint16_t* const* src, int nsrc, int width) = nullptr;
  // One online-softmax step of the lane block over rows[0, num_rows) (num_rows in
  // [1, kLaneTileRows]; rows[0] has index row0), keys and values as in attend_tile. Each lane's
  // result depends only on its own query, limit and rows (not on the other lanes or on which
  // rows past its limit the tile includes), so a query's output is the same whatever queries
  // share its block.
  void (*attend_lanes)(const LaneBlock& lb, const float* const* rows, int num_rows, int64_t row0,
                       int key_width, int value_offset, int value_width, float scale) = nullptr;
};

inline constexpr int kMaxSources = 64;

// k.dots / k.dots_bf16w with b[j] = row first_row + j of `w` (f32 or bf16), j < nb ≤ kMaxSources.
void DotsWeightRows(const TileKernels& k, const float* const* a, int na, const MatmulWeights& w,
                    int64_t first_row, int nb, float* const* out);
// k.axpy / k.axpy_bf16w with src[j] = row first_row + j of `w`, j < nsrc ≤ kMaxSources.
void AxpyWeightRows(const TileKernels& k, float* const* out, int n, const float* init,
                    const float* const* coef, const MatmulWeights& w, int64_t first_row, int nsrc);

// The kernels of `isa` (kAvx2 or kAvx512 and above; CHECK-fails on kScalar).
const TileKernels& TileKernelsFor(Isa isa);

// kv_b_proj widened to f32 (the scalar-ISA reference paths).
std::vector<float> KvbAsF32(const MatmulWeights& w_kvb);

// Query absorption for n ≤ kMaxQueries queries of head h, W_UK,h = rows [h·(dn + dv), +dn) of
// w_kvb (kv_b_proj, f32 or bf16):
//   out[i] = [W_UKᵀ q[i][0, dn) (r) ; q[i][dn, dn + dr)]      (lat_w floats)
void Absorb(const TileKernels& k, const MatmulWeights& w_kvb, int h, const MlaDims& d,
            const float* const* q, int n, float* const* out);

// Up-projection and output gate for n ≤ kMaxQueries queries of head h, W_UV,h = rows
// [h·(dn + dv) + dn, +dv) of w_kvb:
//   o[i] = W_UV x[i] (dv floats), then o[i] ⊙= sigmoid(gate[i]) when gate[i] != nullptr.
void UpProject(const TileKernels& k, const MatmulWeights& w_kvb, int h, const MlaDims& d,
               const float* const* x, int n, const float* const* gate, float* const* o);

}  // namespace strata::kernels::cpu::mla
