// MLA prefill's expanded work item (sequence, head) with bf16 products on 16 × 16 tiles; see
// internal/mla_prefill_bf16.h for what it computes and its numerics.
//
// Everything is computed transposed so that every operand is either in its natural row layout
// (an A tile) or packed once per item (a B tile), and the softmax runs with one query per lane:
//   expansion  k_nope[j] = W_UK c_j, v[j] = W_UV c_j:  A = context rows c_j, B = W_UK / W_UV
//              (packed once per item); k_nope goes to the key rows, v transposed to vᵀ rows.
//   scores     sᵀ[j][i] = k_j · q_i:  A = key rows [k_nope ; k_pe], B = the queries (packed
//              once per item). A score tile holds 16 rows × 16 queries, one query per lane.
//   softmax    per lane: running max and sum over 128-row steps, P rounded to bf16 and
//              interleaved in pairs of rows straight into B tiles (vpermw).
//   output     oᵀ[d][i] += Σ_j vᵀ[d][j] · P[i][j]:  A = vᵀ rows, B = P; the step's tiles are added
//              to the f32 accumulators after scaling them by exp(old max − new max).
// Context rows are expanded 256 at a time (one GatherRows) into keys and vᵀ that stay in L2,
// then every 32-query block of the chunk that sees them attends them.
// The tile products run on AMX (AmxTiles) or, on AVX512-BF16 CPUs without it, as vdpbf16ps over
// the same packed tiles (DotTiles: measured 85–88 % of the vdpbf16ps ceiling on the expansion,
// 57 % on a whole 512-token prompt, AMD Zen 4). The AMX engine has not run yet: this session's
// CPU has no AMX (the DotTiles path is tested; the AMX loop is matmul_amx.cc's, tested there).
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/amx.h"
#include "core/check.h"
#include "core/tensor.h"
#include "kernels/cpu/internal/amx_tiles.h"
#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/internal/mla_prefill_bf16.h"
#include "kernels/cpu/internal/simd_exp.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/mla_paged.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu::internal {
namespace {

constexpr int kTile = kAmxTile;
constexpr int kStepK = kAmxStepK;
constexpr int kTileBf16 = kAmxTileBytes / 2;  // bf16 per tile
constexpr int kTileF32 = kAmxTileBytes / 4;   // f32 (or 32-bit words) per tile
constexpr int kSuperRows = kMaxGatherRows;    // context rows expanded at a time (256)
constexpr int kStepRows = 128;                // context rows per online-softmax step
constexpr int kQueries = 2 * kTile;           // queries per block: two B tiles

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

struct Shape {
  int dn, dr, dv, r, heads;
  int64_t q_w;      // dn + dr: a query's (and a key's) width
  int q_steps;      // k steps of a score tile: roundup(dn + dr, 32) / 32
  int r_steps;      // k steps of the expansion: roundup(r, 32) / 32
  int nope_blocks;  // 16-column blocks of k_nope out of the expansion: roundup(dn, 32) / 16
  int v_blocks;     // 16-row blocks of vᵀ: roundup(dv, 32) / 16
  int64_t num_new, first_pos, t_pad;  // T, C and roundup(T, 32)
};

Shape ShapeOf(const MlaDims& d, const MlaPrefillSequence& seq) {
  Shape s;
  s.dn = d.qk_nope_head_dim;
  s.dr = d.qk_rope_head_dim;
  s.dv = d.v_head_dim;
  s.r = d.kv_lora_rank;
  s.heads = d.num_heads;
  s.q_w = s.dn + s.dr;
  s.q_steps = static_cast<int>(RoundUp(s.q_w, kStepK) / kStepK);
  s.r_steps = static_cast<int>(RoundUp(s.r, kStepK) / kStepK);
  s.nope_blocks = static_cast<int>(RoundUp(s.dn, 2 * kTile) / kTile);
  s.v_blocks = static_cast<int>(RoundUp(s.dv, 2 * kTile) / kTile);
  s.num_new = seq.num_new_tokens;
  s.first_pos = seq.context.num_tokens - seq.num_new_tokens;
  s.t_pad = RoundUp(s.num_new, kQueries);
  return s;
}

// An item's working set, carved from one per-thread buffer that only grows.
struct Buffers {
  uint32_t* w_nope;  // W_UK,h as B tiles [nope_blocks][r_steps] (PackXForAmxInto)
  uint32_t* w_v;     // W_UV,h as B tiles [v_blocks][r_steps]
  uint32_t* q;       // the queries as B tiles [t_pad / 16][q_steps]
  int64_t* q_rows;   // [T] row of query t in seq.q (rows of q_w floats)
  uint16_t* latent;  // context rows as A tiles [kSuperRows / 16][r_steps]
  uint16_t* keys;    // key rows as A tiles [kSuperRows / 16][q_steps]
  uint16_t* vt;      // vᵀ as A tiles [v_blocks][kSuperRows / 32]
  float* o;          // Σ P v per query block: [t_pad / 32][v_blocks · 16][kQueries]
  float* max;        // [t_pad] running max of the scaled scores
  float* sum;        // [t_pad] running Σ exp(s − max)
  int32_t* limit;    // [t_pad] query i sees rows < limit[i]
  float* scores;     // [2][kStepRows][16]: a step's score tiles, per half of the query block
  uint16_t* p;       // P as B tiles [kStepRows / 32][2]
  float* tiles;      // [4][256] stored accumulators
};

// An item's buffers carved from `storage` (grown as needed).
Buffers CarveBuffers(const Shape& s, AlignedBuffer& storage) {
  size_t offsets[14];
  size_t total = 0;
  int n = 0;
  auto reserve = [&](size_t bytes) {
    offsets[n++] = total;
    total += RoundUp(static_cast<int64_t>(bytes), 64);
  };
  const size_t t_pad = static_cast<size_t>(s.t_pad);
  reserve(sizeof(uint32_t) * PackedXForAmxWords(s.r, s.dn));
  reserve(sizeof(uint32_t) * PackedXForAmxWords(s.r, s.dv));
  reserve(sizeof(uint32_t) * PackedXForAmxWords(s.q_w, s.num_new));
  reserve(sizeof(int64_t) * s.num_new);
  reserve(size_t{kAmxTileBytes} * kSuperRows / kTile * s.r_steps);
  reserve(size_t{kAmxTileBytes} * kSuperRows / kTile * s.q_steps);
  reserve(size_t{kAmxTileBytes} * s.v_blocks * kSuperRows / kStepK);
  reserve(sizeof(float) * t_pad * s.v_blocks * kTile);
  reserve(sizeof(float) * t_pad);
  reserve(sizeof(float) * t_pad);
  reserve(sizeof(int32_t) * t_pad);
  reserve(sizeof(float) * 2 * kStepRows * kTile);
  reserve(size_t{kAmxTileBytes} * kStepRows / kStepK * 2);
  reserve(size_t{kAmxTileBytes} * 4);
  if (storage.size() < total) {
    storage = AlignedBuffer(total + total / 4, AlignedBuffer::Fill::kUninitialized);
  }
  char* base = storage.as<char>();
  int i = 0;
  Buffers b;
  b.w_nope = reinterpret_cast<uint32_t*>(base + offsets[i++]);
  b.w_v = reinterpret_cast<uint32_t*>(base + offsets[i++]);
  b.q = reinterpret_cast<uint32_t*>(base + offsets[i++]);
  b.q_rows = reinterpret_cast<int64_t*>(base + offsets[i++]);
  b.latent = reinterpret_cast<uint16_t*>(base + offsets[i++]);
  b.keys = reinterpret_cast<uint16_t*>(base + offsets[i++]);
  b.vt = reinterpret_cast<uint16_t*>(base + offsets[i++]);
  b.o = reinterpret_cast<float*>(base + offsets[i++]);
  b.max = reinterpret_cast<float*>(base + offsets[i++]);
  b.sum = reinterpret_cast<float*>(base + offsets[i++]);
  b.limit = reinterpret_cast<int32_t*>(base + offsets[i++]);
  b.scores = reinterpret_cast<float*>(base + offsets[i++]);
  b.p = reinterpret_cast<uint16_t*>(base + offsets[i++]);
  b.tiles = reinterpret_cast<float*>(base + offsets[i++]);
  CHECK_EQ(i, n);
  return b;
}

// This thread's buffers (an item's whole working set; a split task uses their step scratch).
Buffers ThreadBuffers(const Shape& s) {
  thread_local AlignedBuffer buffer;
  return CarveBuffers(s, buffer);
}

// The tile engines. Block2x2: out[0..3] (16 × 16 f32 each, rows 64 bytes apart) ← Σ_s A0_s·B0_s,
// A0_s·B1_s, A1_s·B0_s, A1_s·B1_s over s < steps, operand X of step s being the 1 KB tile at
// x + s·x_step bytes (A: 16 rows × 32 bf16; B: 16 pair rows × 16 words). Begin / End bracket a
// thread's use.

// AMX tiles. The next step's loads follow the last product reading the tile they replace (tiles
// are not renamed).
struct AmxTiles {
  STRATA_TARGET_AMX static void Begin() { ConfigureAmxTiles16x64(); }
  STRATA_TARGET_AMX static void End() { _tile_release(); }
  STRATA_TARGET_AMX static void Block2x2(const void* a0, const void* a1, int64_t a_step,
                                         const void* b0, const void* b1, int64_t b_step, int steps,
                                         float* const* out) {
    const auto* pa0 = static_cast<const char*>(a0);
    const auto* pa1 = static_cast<const char*>(a1);
    const auto* pb0 = static_cast<const char*>(b0);
    const auto* pb1 = static_cast<const char*>(b1);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, pa0, 64);
    _tile_loadd(5, pa1, 64);
    _tile_loadd(6, pb0, 64);
    _tile_loadd(7, pb1, 64);
    for (int s = 0; s < steps; ++s) {
      const int64_t next = std::min(s + 1, steps - 1);  // the last step reloads its own
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(4, pa0 + next * a_step, 64);
      _tile_dpbf16ps(2, 5, 6);
      _tile_loadd(6, pb0 + next * b_step, 64);
      _tile_dpbf16ps(3, 5, 7);
      _tile_loadd(5, pa1 + next * a_step, 64);
      _tile_loadd(7, pb1 + next * b_step, 64);
    }
    _tile_stored(0, out[0], 64);
    _tile_stored(1, out[1], 64);
    _tile_stored(2, out[2], 64);
    _tile_stored(3, out[3], 64);
  }
};

// vdpbf16ps on the same tiles (AVX512-BF16 without AMX): per tile, 16 accumulator rows; for each
// pair row of B, each row's pair word of A broadcast against it.
struct DotTiles {
  static void Begin() {}
  static void End() {}
  STRATA_TARGET_AMX static void Tile(const char* a, int64_t a_step, const char* b, int64_t b_step,
                                     int steps, float* out) {
    __m512 acc[kTile];
    for (int m = 0; m < kTile; ++m) acc[m] = _mm512_setzero_ps();
    for (int s = 0; s < steps; ++s) {
      const auto* aw = reinterpret_cast<const int32_t*>(a + s * a_step);
      const char* bs = b + s * b_step;
      for (int p = 0; p < kTile; ++p) {
        const __m512bh bv = (__m512bh)_mm512_load_si512(bs + p * 64);
        for (int m = 0; m < kTile; ++m) {
          acc[m] = _mm512_dpbf16_ps(acc[m], (__m512bh)_mm512_set1_epi32(aw[m * kTile + p]), bv);
        }
      }
    }
    for (int m = 0; m < kTile; ++m) _mm512_store_ps(out + m * kTile, acc[m]);
  }
  static void Block2x2(const void* a0, const void* a1, int64_t a_step, const void* b0,
                       const void* b1, int64_t b_step, int steps, float* const* out) {
    const auto* pa0 = static_cast<const char*>(a0);
    const auto* pa1 = static_cast<const char*>(a1);
    const auto* pb0 = static_cast<const char*>(b0);
    const auto* pb1 = static_cast<const char*>(b1);
    Tile(pa0, a_step, pb0, b_step, steps, out[0]);
    Tile(pa0, a_step, pb1, b_step, steps, out[1]);
    Tile(pa1, a_step, pb0, b_step, steps, out[2]);
    Tile(pa1, a_step, pb1, b_step, steps, out[3]);
  }
};

// 32 values (src[0, count), zeros past it) rounded to bf16.
STRATA_TARGET_AMX __m512i Bf16x32(const float* src, int64_t count) {
  const __m512 lo = _mm512_maskz_loadu_ps(FirstLanes512(count), src);
  const __m512 hi = _mm512_maskz_loadu_ps(FirstLanes512(count - 16), src + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// Context rows rows[0, n) (zeros to n_pad) → the latent A tiles (c_j, r wide) and the rope part
// of the key rows (k_pe,j at columns [dn, dn + dr), zeros past it; k_nope comes from Expand).
STRATA_TARGET_AMX void PackContext(const Shape& s, const float* const* rows, int n, int n_pad,
                                   const Buffers& b) {
  alignas(64) float key_row[kMlaBf16MaxKeyWidth];
  static_assert(kMlaBf16MaxKeyWidth % kStepK == 0);
  CHECK_LE(s.q_steps * kStepK, kMlaBf16MaxKeyWidth) << "key width " << s.q_w;
  for (int j = 0; j < n_pad; ++j) {
    const int jb = j / kTile, ji = j % kTile;
    uint16_t* latent = b.latent + int64_t{jb} * s.r_steps * kTileBf16 + ji * kStepK;
    uint16_t* key = b.keys + int64_t{jb} * s.q_steps * kTileBf16 + ji * kStepK;
    if (j >= n) {
      for (int st = 0; st < s.r_steps; ++st) {
        _mm512_store_si512(latent + st * kTileBf16, _mm512_setzero_si512());
      }
      for (int st = 0; st < s.q_steps; ++st) {
        _mm512_store_si512(key + st * kTileBf16, _mm512_setzero_si512());
      }
      continue;
    }
    for (int st = 0; st < s.r_steps; ++st) {
      _mm512_store_si512(latent + st * kTileBf16,
                         Bf16x32(rows[j] + st * kStepK, s.r - st * kStepK));
    }
    std::fill(key_row, key_row + s.q_steps * kStepK, 0.0f);
    std::memcpy(key_row + s.dn, rows[j] + s.r, sizeof(float) * s.dr);
    for (int st = 0; st < s.q_steps; ++st) {
      _mm512_store_si512(key + st * kTileBf16, Bf16x32(key_row + st * kStepK, kStepK));
    }
  }
}

// k_nope columns [c0, c0 + 16) of rows jb·16 .. (tile t[j][c]) into the key rows, c < dn only.
STRATA_TARGET_AMX void StoreKeys(const Shape& s, const float* t, int jb, int c0, uint16_t* keys) {
  const __mmask16 mask = FirstLanes512(s.dn - c0);
  uint16_t* dst = keys + (int64_t{jb} * s.q_steps + c0 / kStepK) * kTileBf16 + c0 % kStepK;
  for (int i = 0; i < kTile; ++i) {
    const __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(t + i * kTile));
    _mm256_mask_storeu_epi16(dst + i * kStepK, mask, v);
  }
}

// v of rows jb·16 .. and columns [16·vb, 16·vb + 16) (tile t[j][d]) transposed into vᵀ.
STRATA_TARGET_AMX void StoreValuesT(const float* t, int jb, int vb, uint16_t* vt) {
  __m512 r[kTile];
  for (int i = 0; i < kTile; ++i) r[i] = _mm512_load_ps(t + i * kTile);
  Transpose16x16(r);
  constexpr int kTilesPerRow = kSuperRows / kStepK;
  uint16_t* dst = vt + (int64_t{vb} * kTilesPerRow + jb / 2) * kTileBf16 + (jb % 2) * kTile;
  for (int d = 0; d < kTile; ++d) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + d * kStepK),
                       (__m256i)_mm512_cvtneps_pbh(r[d]));
  }
}

// Keys and vᵀ of the packed context rows [0, n_pad).
template <class Tiles>
STRATA_TARGET_AMX void Expand(const Shape& s, int n_pad, const Buffers& b) {
  const int64_t a_tiles = s.r_steps;  // tiles per 16-row latent block
  for (int jb = 0; jb < n_pad / kTile; jb += 2) {
    const uint16_t* a0 = b.latent + jb * a_tiles * kTileBf16;
    const uint16_t* a1 = a0 + a_tiles * kTileBf16;
    for (int cb = 0; cb < s.nope_blocks + s.v_blocks; cb += 2) {
      const bool nope = cb < s.nope_blocks;
      const uint32_t* w = nope ? b.w_nope + int64_t{cb} * s.r_steps * kTileF32
                               : b.w_v + int64_t{cb - s.nope_blocks} * s.r_steps * kTileF32;
      float* const out[4] = {b.tiles, b.tiles + kTileF32, b.tiles + 2 * kTileF32,
                             b.tiles + 3 * kTileF32};
      Tiles::Block2x2(a0, a1, kAmxTileBytes, w, w + s.r_steps * kTileF32, kAmxTileBytes, s.r_steps,
                      out);
      for (int q = 0; q < 4; ++q) {  // tile q: rows of block jb + q / 2, columns of cb + q % 2
        const int jq = jb + q / 2, cq = cb + q % 2;
        if (nope) {
          StoreKeys(s, out[q], jq, cq * kTile, b.keys);
        } else {
          StoreValuesT(out[q], jq, cq - s.nope_blocks, b.vt);
        }
      }
    }
  }
}

// One online-softmax step for the 16 queries of a half block: scores[rows_pad][16] (unscaled)
// of rows j0 .. → P as bf16 pairs into the B tiles p + (js·2)·tile (this half's column), max and
// sum updated. Returns α = exp(old max − new max) per query.
STRATA_TARGET_AMX __m512 SoftmaxStep(float* scores, int rows_pad, int64_t j0, const int32_t* limit,
                                     float scale, float* max, float* sum, uint16_t* p) {
  const __m512i lim = _mm512_loadu_si512(limit);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 old_max = _mm512_loadu_ps(max);
  __m512 new_max = old_max;
  for (int i = 0; i < rows_pad; ++i) {
    const __mmask16 seen =
        _mm512_cmplt_epi32_mask(_mm512_set1_epi32(static_cast<int32_t>(j0 + i)), lim);
    const __m512 v = _mm512_mask_mul_ps(neg_inf, seen, _mm512_load_ps(scores + i * kTile), vscale);
    _mm512_store_ps(scores + i * kTile, v);
    new_max = _mm512_max_ps(new_max, v);
  }
  const __m512 alpha = Exp512(_mm512_sub_ps(old_max, new_max));  // 0 before the first row
  // Word i of a pair row: (P[i][2p], P[i][2p + 1]) from cvtne2ps's [P_2p (16) | P_2p+1 (16)].
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  __m512 l0 = _mm512_setzero_ps(), l1 = _mm512_setzero_ps();
  for (int pair = 0; pair < rows_pad / 2; ++pair) {
    const __m512 p0 = Exp512(_mm512_sub_ps(_mm512_load_ps(scores + 2 * pair * kTile), new_max));
    const __m512 p1 =
        Exp512(_mm512_sub_ps(_mm512_load_ps(scores + (2 * pair + 1) * kTile), new_max));
    l0 = _mm512_add_ps(l0, p0);
    l1 = _mm512_add_ps(l1, p1);
    const __m512i words =
        _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
    _mm512_store_si512(p + (pair / kTile) * 2 * kTileBf16 + (pair % kTile) * kStepK, words);
  }
  _mm512_storeu_ps(sum, _mm512_fmadd_ps(alpha, _mm512_loadu_ps(sum), _mm512_add_ps(l0, l1)));
  _mm512_storeu_ps(max, new_max);
  return alpha;
}

// Query block qb (queries [32·qb, 32·qb + 32)) over context rows [j0, j0 + rows) of the current
// 256-row group starting at row0: scores, softmax step, o ← α·o + P·v.
template <class Tiles>
STRATA_TARGET_AMX void AttendStep(const Shape& s, float scale, const Buffers& b, int64_t qb,
                                  int64_t row0, int64_t j0, int rows) {
  const int row_steps = static_cast<int>(RoundUp(rows, kStepK) / kStepK);
  const int jb0 = static_cast<int>((j0 - row0) / kTile);
  const int64_t q_block_words = int64_t{s.q_steps} * kTileF32;
  const uint32_t* q0 = b.q + 2 * qb * q_block_words;
  const uint32_t* q1 = q0 + q_block_words;
  for (int jt = 0; jt < 2 * row_steps; jt += 2) {
    const uint16_t* k0 = b.keys + int64_t{jb0 + jt} * s.q_steps * kTileBf16;
    const uint16_t* k1 = k0 + int64_t{s.q_steps} * kTileBf16;
    float* const out[4] = {b.scores + jt * kTileF32, b.scores + (kStepRows / kTile + jt) * kTileF32,
                           b.scores + (jt + 1) * kTileF32,
                           b.scores + (kStepRows / kTile + jt + 1) * kTileF32};
    Tiles::Block2x2(k0, k1, kAmxTileBytes, q0, q1, kAmxTileBytes, s.q_steps, out);
  }
  __m512 alpha[2];
  for (int half = 0; half < 2; ++half) {
    const int64_t i0 = qb * kQueries + half * kTile;
    alpha[half] = SoftmaxStep(b.scores + half * kStepRows * kTile, row_steps * kStepK, j0,
                              b.limit + i0, scale, b.max + i0, b.sum + i0, b.p + half * kTileBf16);
  }
  constexpr int kTilesPerRow = kSuperRows / kStepK;
  const int js0 = static_cast<int>((j0 - row0) / kStepK);
  float* o = b.o + qb * s.v_blocks * kTile * kQueries;
  for (int vb = 0; vb < s.v_blocks; vb += 2) {
    const uint16_t* v0 = b.vt + (int64_t{vb} * kTilesPerRow + js0) * kTileBf16;
    const uint16_t* v1 = v0 + kTilesPerRow * kTileBf16;
    float* const out[4] = {b.tiles, b.tiles + kTileF32, b.tiles + 2 * kTileF32,
                           b.tiles + 3 * kTileF32};
    Tiles::Block2x2(v0, v1, kAmxTileBytes, b.p, b.p + kTileBf16, 2 * kAmxTileBytes, row_steps, out);
    for (int q = 0; q < 4; ++q) {  // tile q: vᵀ rows of block vb + q / 2, query half q % 2
      float* dst = o + (vb + q / 2) * kTile * kQueries + (q % 2) * kTile;
      for (int d = 0; d < kTile; ++d) {
        const __m512 acc = _mm512_load_ps(dst + d * kQueries);
        _mm512_store_ps(dst + d * kQueries,
                        _mm512_fmadd_ps(alpha[q % 2], acc, _mm512_load_ps(out[q] + d * kTile)));
      }
    }
  }
}

// seq.o (⊙ sigmoid(gate)) of head h ← o / sum, transposed back to one row per query.
STRATA_TARGET_AMX void WriteOutputs(const Shape& s, const Buffers& b, const MlaPrefillSequence& seq,
                                    int h) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t t0 = 0; t0 < s.num_new; t0 += kTile) {
    const int nq = static_cast<int>(std::min<int64_t>(kTile, s.num_new - t0));
    const int64_t qb = t0 / kQueries, half = (t0 % kQueries) / kTile;
    const float* o = b.o + qb * s.v_blocks * kTile * kQueries + half * kTile;
    const __m512 inv = _mm512_div_ps(one, _mm512_loadu_ps(b.sum + t0));
    for (int vb = 0; vb * kTile < s.dv; ++vb) {
      __m512 r[kTile];
      for (int d = 0; d < kTile; ++d) {
        r[d] = _mm512_mul_ps(_mm512_load_ps(o + (vb * kTile + d) * kQueries), inv);
      }
      Transpose16x16(r);
      const __mmask16 mask = FirstLanes512(s.dv - vb * kTile);
      for (int i = 0; i < nq; ++i) {
        const int64_t at = ((t0 + i) * s.heads + h) * s.dv + vb * kTile;
        __m512 v = r[i];
        if (seq.gate != nullptr) {
          const __m512 g = _mm512_maskz_loadu_ps(mask, seq.gate + at);
          v = _mm512_div_ps(v, _mm512_add_ps(one, Exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        }
        _mm512_mask_storeu_ps(seq.o + at, mask, v);
      }
    }
  }
}

// Head h's operands: W_UK,h and W_UV,h as bf16 B tiles (bf16 rows copied, f32 rows rounded:
// the same bits), the queries as B tiles, the softmax state empty, the causal limits.
STRATA_TARGET_AMX void PrepareHead(const Shape& s, const MatmulWeights& w_kvb,
                                   const MlaPrefillSequence& seq, int h, const Buffers& b) {
  const int64_t head_row = int64_t{h} * (s.dn + s.dv);
  auto pack_head = [&](const auto* w) {
    const auto* w_head = w + head_row * s.r;
    PackXForAmxInto(w_head, s.r, nullptr, s.dn, b.w_nope);
    PackXForAmxInto(w_head + int64_t{s.dn} * s.r, s.r, nullptr, s.dv, b.w_v);
  };
  if (w_kvb.format == WeightFormat::kBf16) {
    pack_head(static_cast<const uint16_t*>(w_kvb.data));
  } else {
    CHECK(w_kvb.format == WeightFormat::kF32) << "kv_b_proj in f32 or bf16";
    pack_head(static_cast<const float*>(w_kvb.data));
  }
  for (int64_t t = 0; t < s.num_new; ++t) b.q_rows[t] = t * s.heads + h;
  PackXForAmxInto(seq.q, s.q_w, b.q_rows, s.num_new, b.q);
  std::fill(b.o, b.o + s.t_pad * s.v_blocks * kTile, 0.0f);
  std::fill(b.max, b.max + s.t_pad, -std::numeric_limits<float>::infinity());
  std::fill(b.sum, b.sum + s.t_pad, 0.0f);
  for (int64_t i = 0; i < s.t_pad; ++i) {  // padding queries see row 0 (never written out)
    b.limit[i] = static_cast<int32_t>(s.first_pos + std::min(i, s.num_new - 1) + 1);
  }
}

// Context rows [row0, row0 + kSuperRows) (fewer at the end) packed and expanded into b's
// latent, key and vᵀ tiles (b.tiles as scratch). Returns the number of rows.
template <class Tiles>
STRATA_TARGET_AMX int ExpandSuper(const Shape& s, const MlaPrefillSequence& seq, int64_t row0,
                                  const Buffers& b) {
  const int n = static_cast<int>(std::min<int64_t>(kSuperRows, seq.context.num_tokens - row0));
  const int n_pad = static_cast<int>(RoundUp(n, kStepK));
  const float* rows[kSuperRows];
  GatherRows(seq.context, row0, n, s.r + s.dr, rows);
  PackContext(s, rows, n, n_pad, b);
  Expand<Tiles>(s, n_pad, b);
  return n;
}

// Query block qb over the expanded rows [row0, row0 + n) in b, in kStepRows steps. Rows a query
// of the block sees end at the block's last query's limit; rows past it are not computed (their
// P would be exactly 0: skipping them changes no bit).
template <class Tiles>
STRATA_TARGET_AMX void AttendSuper(const Shape& s, float scale, const Buffers& b, int64_t qb,
                                   int64_t row0, int n) {
  const int64_t end = std::min(row0 + n, s.first_pos + std::min(s.num_new, (qb + 1) * kQueries));
  for (int64_t j0 = row0; j0 < end; j0 += kStepRows) {
    AttendStep<Tiles>(s, scale, b, qb, row0, j0,
                      static_cast<int>(std::min<int64_t>(kStepRows, end - j0)));
  }
}

template <class Tiles>
STRATA_TARGET_AMX void RunItem(const MlaDims& dims, float scale, const MatmulWeights& w_kvb,
                               const MlaPrefillSequence& seq, int h) {
  const Shape s = ShapeOf(dims, seq);
  const Buffers b = ThreadBuffers(s);
  PrepareHead(s, w_kvb, seq, h, b);
  Tiles::Begin();
  for (int64_t row0 = 0; row0 < seq.context.num_tokens; row0 += kSuperRows) {
    const int n = ExpandSuper<Tiles>(s, seq, row0, b);
    for (int64_t qb = 0; qb < s.t_pad / kQueries; ++qb)
      AttendSuper<Tiles>(s, scale, b, qb, row0, n);
  }
  Tiles::End();
  WriteOutputs(s, b, seq, h);
}

// `shared` with this thread's step scratch (scores, P, accumulator tiles).
Buffers WithThreadScratch(const Shape& s, Buffers shared) {
  const Buffers mine = ThreadBuffers(s);
  shared.scores = mine.scores;
  shared.p = mine.p;
  shared.tiles = mine.tiles;
  return shared;
}

// The heads of `seq` one after another, the threads sharing each: per 256-row super-block, one
// task expands the next super-block (two sets of latent / key / vᵀ tiles, alternating) while the
// others attend the current one, a 32-query block each. Every query takes the same steps as in
// RunItem: the same outputs bit for bit.
template <class Tiles>
STRATA_TARGET_AMX void RunSplit(const MlaDims& dims, float scale, const MatmulWeights& w_kvb,
                                const MlaPrefillSequence& seq) {
  const Shape s = ShapeOf(dims, seq);
  thread_local AlignedBuffer storage[2];  // the caller's; tasks' scratch is ThreadBuffers'
  Buffers b[2] = {CarveBuffers(s, storage[0]), CarveBuffers(s, storage[1])};
  // One set of everything but the expanded tiles.
  b[1].w_nope = b[0].w_nope;
  b[1].w_v = b[0].w_v;
  b[1].q = b[0].q;
  b[1].q_rows = b[0].q_rows;
  b[1].o = b[0].o;
  b[1].max = b[0].max;
  b[1].sum = b[0].sum;
  b[1].limit = b[0].limit;
  const int64_t len = seq.context.num_tokens, blocks = s.t_pad / kQueries;
  const int64_t supers = (len + kSuperRows - 1) / kSuperRows;
  for (int h = 0; h < s.heads; ++h) {
    PrepareHead(s, w_kvb, seq, h, b[0]);
    int n = 0;
    {
      Tiles::Begin();
      n = ExpandSuper<Tiles>(s, seq, 0, WithThreadScratch(s, b[0]));
      Tiles::End();
    }
    for (int64_t sb = 0; sb < supers; ++sb) {
      const int64_t row0 = sb * kSuperRows;
      const bool next = sb + 1 < supers;
      // Blocks whose last query sees row0: from the one holding position row0 on.
      const int64_t first_block = std::max<int64_t>(0, row0 - s.first_pos) / kQueries;
      int next_n = 0;
      ParallelFor(blocks - first_block + (next ? 1 : 0), true, [&](int64_t task) {
        Tiles::Begin();
        if (next && task == 0) {
          next_n =
              ExpandSuper<Tiles>(s, seq, row0 + kSuperRows, WithThreadScratch(s, b[(sb + 1) % 2]));
        } else {
          const int64_t qb = blocks - 1 - (task - (next ? 1 : 0));  // the longest first
          AttendSuper<Tiles>(s, scale, WithThreadScratch(s, b[sb % 2]), qb, row0, n);
        }
        Tiles::End();
      });
      n = next_n;
    }
    WriteOutputs(s, b[0], seq, h);
  }
}

}  // namespace

bool MlaPrefillUsesBf16(const MlaDims& dims) {
  return GetMatmulPrecision() != MatmulPrecision::kF32 && Bf16MatmulSupported() &&
         dims.qk_nope_head_dim + dims.qk_rope_head_dim <= kMlaBf16MaxKeyWidth;
}

void RunExpandedItemBf16(const MlaDims& dims, float scale, const MatmulWeights& w_kvb,
                         const MlaPrefillSequence& seq, int h) {
  CHECK(Bf16MatmulSupported()) << "RunExpandedItemBf16 needs AVX512-BF16";
  if (AmxBf16Usable()) {
    RunItem<AmxTiles>(dims, scale, w_kvb, seq, h);
  } else {
    RunItem<DotTiles>(dims, scale, w_kvb, seq, h);
  }
}

void RunExpandedSplitBf16(const MlaDims& dims, float scale, const MatmulWeights& w_kvb,
                          const MlaPrefillSequence& seq) {
  CHECK(Bf16MatmulSupported()) << "RunExpandedSplitBf16 needs AVX512-BF16";
  if (AmxBf16Usable()) {
    RunSplit<AmxTiles>(dims, scale, w_kvb, seq);
  } else {
    RunSplit<DotTiles>(dims, scale, w_kvb, seq);
  }
}

int64_t MlaBf16QueryBlocks(int64_t num_new_tokens) {
  return RoundUp(num_new_tokens, kQueries) / kQueries;
}

}  // namespace strata::kernels::cpu::internal
