// bf16 products on AMX tiles (MatmulPrecision::kBf16 on CPUs with AMX-BF16): y = x · Wᵀ with x
// rounded to bf16 and f32 sums, reading the bf16 weights where they lie — no per-call reorder of
// W (oneDNN's, which made its AMX path slower than f32 below 64 rows) and no second copy of W.
//
// Computed transposed, yᵀ = W · xᵀ: a weight tile (16 W rows × 32 k) is the A operand in W's own
// row layout, and x goes to the B operand in AMX's pair-interleaved layout, packed once per
// product (PackXForAmx). Each task owns a group of 32-row W blocks and copies them (all of k) to a
// contiguous buffer that stays in L2 (W rows lie 2ⁿ bytes apart, so read in place all 32 rows of
// a tile fall into two L1 sets and miss every time: measured 290 vs 650 GFLOP/s on one core).
// Then for every pair of 16-row x blocks and every W block of the group, a 2 × 2 block of tiles
// (32 W rows × 32 x rows, 4 accumulators) runs over all of k. The next k step's operand loads go
// right after the last product that reads the tile they replace: tiles are not renamed, so
// loading all four first serializes loads and products (742 vs 1,701 GFLOP/s on one core from
// L1). A finished block is transposed (16 × 16 in AVX-512 registers) into y while the next one
// runs on the tile unit.
//
// The expert products of a MoE layer (grouped GLU and scatter-add) differ: at prefill sizes an
// expert sees ~64 rows, so reading its weights, not the tiles, bounds them. There
//   - the epilogue works on the finished tiles: a GLU pair (an expert's gate and up) computes
//     both blocks of the same W rows and writes act(gate) ⊙ cap(up) straight into h; a
//     scatter-add adds scale[i] · block row i into y[rows[i]], its tasks column blocks spanning
//     every group (matmul_scatter_add.cc) so no two threads add to one element. Writing the
//     products out and adding them in a second, serial pass cost more than the products
//     (measured: down products 5.4 ms, their adds 1.6 ms more, for 2 GFLOP);
//   - blocks go one at a time, and the next block's W rows (and a scatter-add's next x) are
//     prefetched to L2 during the current one's products (one core alone reads ~14 GB/s here);
//     prefetched bf16 rows are read in place by the tile loads, with no copy;
//   - the longest products (a shared expert's 512 rows) are the first tasks taken.
// engine_moe_bench --bf16, 512-row prefill of the bench MoE layer: 15.0 → 9.5–10.3 ms.
#include <algorithm>
#include <vector>

#include "core/amx.h"
#include "core/avx512_intrinsics.h"
#include "core/check.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/int8_quantize.h"
#include "core/tensor.h"
#include "kernels/cpu/internal/amx_tiles.h"
#include "kernels/cpu/internal/glu_act.h"
#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/matmul_glu.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu::internal {
namespace {

constexpr int kTile = kAmxTile;     // tile rows (W rows of A, x rows of B)
constexpr int kStepK = kAmxStepK;   // k per tile product (16 pairs)
constexpr int64_t kBlockRows = 32;  // W rows and x rows of a 2 × 2 block of tiles
// Below both, one thread: waking the other costs ~10–20 µs (matmul_driver.cc); the tiles do a
// product of 2²⁵ MACs in about that time.
constexpr int64_t kParallelMinWeightBytes = int64_t{768} << 10;
constexpr int64_t kParallelMinMacs = int64_t{1} << 25;

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// One row of k values as bf16 into dst, zeros after it to a multiple of 32: f32 rounded to
// nearest even, bf16 bits copied.
STRATA_TARGET_AMX void Bf16RowInto(const float* src, int64_t k, int64_t /*kp*/, uint16_t* dst) {
  PackBf16Row(src, k, dst);
}
STRATA_TARGET_AMX void Bf16RowInto(const uint16_t* src, int64_t k, int64_t kp, uint16_t* dst) {
  std::copy(src, src + k, dst);
  std::fill(dst + k, dst + kp, uint16_t{0});
}

// x rows [i0, i0 + 16) (row i = x + rows[i]·k, or row i; rows ≥ m are zeros) as bf16 into one
// block of the B layout: for each k pair p, 16 × (x[i][2p], x[i][2p + 1]) as 32-bit words.
template <typename T>
STRATA_TARGET_AMX void PackXBlock(const T* x, int64_t k, const int64_t* rows, int64_t i0, int64_t m,
                                  int64_t kp, uint16_t* row_buffer, uint32_t* block) {
  for (int r = 0; r < kTile; ++r) {
    uint16_t* dst = row_buffer + r * kp;
    const int64_t i = i0 + r;
    if (i < m) {
      Bf16RowInto(x + (rows != nullptr ? rows[i] : i) * k, k, kp, dst);
    } else {
      std::fill(dst, dst + kp, uint16_t{0});
    }
  }
  for (int64_t p0 = 0; p0 < kp / 2; p0 += kTile) {  // 16 pairs = one k step
    __m512 v[16];
    for (int r = 0; r < kTile; ++r) {
      v[r] = _mm512_castsi512_ps(_mm512_loadu_si512(row_buffer + r * kp + 2 * p0));
    }
    Transpose16x16(v);
    for (int p = 0; p < kTile; ++p) {
      _mm512_storeu_si512(block + (p0 + p) * kTile, _mm512_castps_si512(v[p]));
    }
  }
}

// Block b (x rows [16·b, 16·b + 16)) of PackXForAmxInto's output for x (k, rows, m as there) into
// xp, on this thread.
template <typename T>
STRATA_TARGET_AMX void PackXBlockAt(const T* x, int64_t k, const int64_t* rows, int64_t m,
                                    int64_t b, uint32_t* xp) {
  const int64_t kp = RoundUp(std::max<int64_t>(k, 1), kStepK);
  thread_local AlignedBuffer rows_buffer;
  const size_t row_bytes = static_cast<size_t>(kTile * kp) * sizeof(uint16_t);
  if (rows_buffer.size() < row_bytes) rows_buffer = AlignedBuffer(row_bytes);
  PackXBlock(x, k, rows, b * kTile, m, kp, static_cast<uint16_t*>(rows_buffer.data()),
             xp + b * kp / 2 * kTile);
}

// y rows [i0, i0 + rows) × columns [j0, j0 + cols) ← the transposed 16 × 16 tile t (t[j][i]).
STRATA_TARGET_AMX inline void StoreTransposed(const float* t, float* y, int64_t ldy, int64_t rows,
                                              int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  __m512 r[16];
  for (int i = 0; i < kTile; ++i) r[i] = _mm512_load_ps(t + i * kTile);
  Transpose16x16(r);
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
  for (int64_t i = 0; i < rows; ++i) _mm512_mask_storeu_ps(y + i * ldy, mask, r[i]);
}

// The k slice [k0, k1) of W rows [j0, j0 + 32) (rows ≥ n and k ≥ w.k are zeros) into `slice`:
// per k step, 32 rows × 32 bf16, so each 16-row tile is 1 KB contiguous.
STRATA_TARGET_AMX void PackWSlice(const uint16_t* w, int64_t n, int64_t k, int64_t j0, int64_t k0,
                                  int64_t k1, uint16_t* slice) {
  for (int64_t s = k0; s < k1; s += kStepK) {
    const __mmask32 mask =
        k - s >= kStepK ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << (k - s)) - 1);
    uint16_t* dst = slice + (s - k0) / kStepK * kBlockRows * kStepK;
    for (int64_t r = 0; r < kBlockRows; ++r) {
      const __m512i v = j0 + r < n ? _mm512_maskz_loadu_epi16(mask, w + (j0 + r) * k + s)
                                   : _mm512_setzero_si512();
      _mm512_store_si512(dst + r * kStepK, v);
    }
  }
}

// The same slice of MXFP4 or int8 rows decoded to bf16 (MXFP4 exactly, int8 rounded), one
// 32-element group per k step.
static_assert(kStepK == kMxfp4BlockSize && kStepK == kInt8GroupSize);
void PackWSliceDecoded(const MatmulWeights& w, int64_t j0, int64_t k0, int64_t k1,
                       uint16_t* slice) {
  const int64_t groups = (std::min(k1, w.k) - k0) / kStepK;
  for (int64_t r = 0; r < kBlockRows; ++r) {
    uint16_t* dst = slice + r * kStepK;
    const int64_t row = j0 + r;
    if (row >= w.n) {
      for (int64_t b = 0; b < (k1 - k0) / kStepK; ++b) {
        std::fill(dst + b * kBlockRows * kStepK, dst + b * kBlockRows * kStepK + kStepK, 0);
      }
      continue;
    }
    const int64_t first_group = row * (w.k / kStepK) + k0 / kStepK;
    if (w.format == WeightFormat::kInt8) {
      DecodeInt8RowBf16(static_cast<const int8_t*>(w.data) + row * w.k + k0,
                        reinterpret_cast<const uint16_t*>(w.scales) + first_group, groups,
                        kBlockRows * kStepK, dst);
    } else {
      DecodeMxfp4RowBf16(static_cast<const uint8_t*>(w.data) + row * (w.k / 2) + k0 / 2,
                         w.scales + first_group, groups, kBlockRows * kStepK, dst);
    }
  }
}

using TileBlock = float[4][kTile * kTile];  // the 4 accumulators of a 2 × 2 block

// Software prefetches (to L2) of what the next block will read — its W rows, contiguous in W —
// spread over the current block's products, so the copy that packs it hits L2 instead of waiting
// on DRAM: one core alone reads ~14 GB/s here, and at MoE prefill sizes (~64 rows per expert) a
// block's products take about as long as its read.
class LinePrefetcher {
 public:
  static constexpr int kMaxRanges = 4;
  // Adds [begin, begin + bytes) to the lines to fetch.
  void Add(const void* begin, int64_t bytes) {
    if (bytes <= 0) return;
    CHECK_LT(num_ranges_, kMaxRanges);
    const auto b = reinterpret_cast<uintptr_t>(begin) & ~uintptr_t{63};
    ranges_[num_ranges_++] = {b, reinterpret_cast<uintptr_t>(begin) + bytes};
    lines_ += static_cast<int64_t>((ranges_[num_ranges_ - 1].end - b + 63) / 64);
  }
  // Spreads the lines over `steps` calls of Step().
  void Plan(int64_t steps) { per_step_ = steps > 0 ? (lines_ + steps - 1) / steps : lines_; }
  STRATA_TARGET_AMX void Step() {
    for (int64_t i = 0; i < per_step_ && current_ < num_ranges_; ++i) {
      Range& r = ranges_[current_];
      _mm_prefetch(reinterpret_cast<const char*>(r.next), _MM_HINT_T1);
      r.next += 64;
      if (r.next >= r.end) ++current_;
    }
  }
  void Clear() { *this = LinePrefetcher(); }

 private:
  struct Range {
    uintptr_t next = 0, end = 0;
  };
  Range ranges_[kMaxRanges];
  int num_ranges_ = 0, current_ = 0;
  int64_t lines_ = 0, per_step_ = 0;
};

// The bytes of W rows [j0, j1) (clamped to n) in W's layout, into `prefetch`.
void AddWeightRows(const MatmulWeights& w, int64_t j0, int64_t j1, LinePrefetcher& prefetch) {
  j1 = std::min(j1, w.n);
  if (j1 <= j0) return;
  if (w.format == WeightFormat::kMxfp4) {
    prefetch.Add(static_cast<const uint8_t*>(w.data) + j0 * (w.k / 2), (j1 - j0) * (w.k / 2));
    prefetch.Add(w.scales + j0 * (w.k / kStepK), (j1 - j0) * (w.k / kStepK));
  } else if (w.format == WeightFormat::kInt8) {
    prefetch.Add(static_cast<const int8_t*>(w.data) + j0 * w.k, (j1 - j0) * w.k);
    prefetch.Add(w.scales + 2 * j0 * (w.k / kStepK), 2 * (j1 - j0) * (w.k / kStepK));
  } else {
    prefetch.Add(static_cast<const uint16_t*>(w.data) + j0 * w.k, (j1 - j0) * w.k * 2);
  }
}

// A 32-row W block as the A operands read it: tile rows `stride` bytes apart, k step s's two
// tiles at base + s·step and base + s·step + half (elements). Packed (PackWSlice): 64-byte rows,
// each tile 1 KB contiguous. In place (W's own rows): where k % 32 == 0 and all 32 rows exist.
struct WBlock {
  const uint16_t* base = nullptr;
  int64_t stride = 0, step = 0, half = 0;

  static WBlock Packed(const uint16_t* slice) {
    return {slice, 64, kBlockRows * kStepK, kTile * kStepK};
  }
  static WBlock InPlace(const uint16_t* w, int64_t k, int64_t j0) {
    return {w + j0 * k, k * static_cast<int64_t>(sizeof(uint16_t)), kStepK, kTile * k};
  }
};

// The 2 × 2 block of tiles of one 32-row W block (`steps` k steps) against the x blocks b0 and b1,
// summed over all of k into o (tile q: W rows 16·(q / 2) .., x rows 16·(q % 2) ..). `overlap`
// runs once the first k step's products are issued: the previous block's epilogue (AVX-512) then
// overlaps this block on the tile unit. `prefetch` (if any) issues its share of lines every k
// step.
template <typename Overlap>
STRATA_TARGET_AMX inline void BlockProducts(const WBlock& a, const uint32_t* b0, const uint32_t* b1,
                                            int64_t steps, TileBlock& o, Overlap&& overlap,
                                            LinePrefetcher* prefetch = nullptr) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  // tiles 4, 5: W rows +0 .. +15 and +16 .. +31 of the block; 6, 7: the two x blocks.
  _tile_loadd(4, a.base, a.stride);
  _tile_loadd(5, a.base + a.half, a.stride);
  _tile_loadd(6, b0, 64);
  _tile_loadd(7, b1, 64);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t next = std::min(s + 1, steps - 1);  // the last step reloads its own
    const uint16_t* a_next = a.base + next * a.step;
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(4, a_next, a.stride);
    _tile_dpbf16ps(2, 5, 6);
    _tile_loadd(6, b0 + next * kTile * kTile, 64);
    _tile_dpbf16ps(3, 5, 7);
    _tile_loadd(5, a_next + a.half, a.stride);
    _tile_loadd(7, b1 + next * kTile * kTile, 64);
    if (s == 0) overlap();
    if (prefetch != nullptr) prefetch->Step();
  }
  _tile_stored(0, o[0], 64);
  _tile_stored(1, o[1], 64);
  _tile_stored(2, o[2], 64);
  _tile_stored(3, o[3], 64);
}

// A finished block's tiles stored transposed into y: `rows` x rows × `cols` W rows from yb (row
// stride ldy).
struct PendingStore {
  const TileBlock* tiles = nullptr;
  float* yb = nullptr;
  int64_t ldy = 0, rows = 0, cols = 0;

  STRATA_TARGET_AMX void Flush() {
    if (tiles == nullptr) return;
    const int64_t r0 = std::min<int64_t>(kTile, rows), r1 = rows - r0;
    const int64_t c0 = std::min<int64_t>(kTile, cols), c1 = cols - c0;
    StoreTransposed((*tiles)[0], yb, ldy, r0, c0);
    StoreTransposed((*tiles)[2], yb + kTile, ldy, r0, c1);
    StoreTransposed((*tiles)[1], yb + kTile * ldy, ldy, r1, c0);
    StoreTransposed((*tiles)[3], yb + kTile * ldy + kTile, ldy, r1, c1);
    tiles = nullptr;
  }
};

// A finished gate block and up block of the same W rows: h rows ← act(gate) ⊙ cap(up), `rows` x
// rows × `cols` columns at hb (row stride ldh).
struct PendingGlu {
  const TileBlock* gate = nullptr;
  const TileBlock* up = nullptr;
  float* hb = nullptr;
  int64_t ldh = 0, rows = 0, cols = 0;
  const GluParams* act = nullptr;

  STRATA_TARGET_AMX void Flush() {
    if (gate == nullptr) return;
    alignas(64) float g[kBlockRows * kBlockRows], u[kBlockRows * kBlockRows];
    PendingStore{gate, g, kBlockRows, kBlockRows, kBlockRows}.Flush();
    PendingStore{up, u, kBlockRows, kBlockRows, kBlockRows}.Flush();
    for (int64_t i = 0; i < rows; ++i) {
      GluActAvx512(g + i * kBlockRows, u + i * kBlockRows, cols, *act, hb + i * ldh);
    }
    gate = nullptr;
  }
};

// A finished block added into y: y[rows[i], jb + c] = fma(scale[i], block[i][c], that), x rows i
// of the block in ascending order (rows / scale null: row i / 1).
struct PendingScatterAdd {
  const TileBlock* tiles = nullptr;
  float* y = nullptr;
  int64_t ldy = 0, jb = 0;
  const int64_t* rows = nullptr;  // of the block's first x row
  const float* scale = nullptr;
  int64_t i0 = 0, num_rows = 0, cols = 0;

  STRATA_TARGET_AMX void Flush() {
    if (tiles == nullptr) return;
    for (int half = 0; half < 2; ++half) {  // x rows +0 .. +15, then +16 .. +31
      const int64_t r0 = half * kTile;
      const int64_t n_rows = std::min<int64_t>(kTile, num_rows - r0);
      if (n_rows <= 0) break;
      __m512 lo[16], hi[16];
      for (int t = 0; t < kTile; ++t) {
        lo[t] = _mm512_load_ps((*tiles)[half] + t * kTile);
        hi[t] = _mm512_load_ps((*tiles)[2 + half] + t * kTile);
      }
      Transpose16x16(lo);
      Transpose16x16(hi);
      const int64_t c0 = std::min<int64_t>(kTile, cols), c1 = std::max<int64_t>(0, cols - kTile);
      const __mmask16 m0 = static_cast<__mmask16>((1u << c0) - 1);
      const __mmask16 m1 = static_cast<__mmask16>((1u << c1) - 1);
      for (int64_t r = 0; r < n_rows; ++r) {
        const int64_t i = i0 + r0 + r;
        const __m512 s = _mm512_set1_ps(scale != nullptr ? scale[i] : 1.0f);
        float* dst = y + (rows != nullptr ? rows[i] : i) * ldy + jb;
        _mm512_mask_storeu_ps(dst, m0, _mm512_fmadd_ps(s, lo[r], _mm512_maskz_loadu_ps(m0, dst)));
        _mm512_mask_storeu_ps(dst + kTile, m1,
                              _mm512_fmadd_ps(s, hi[r], _mm512_maskz_loadu_ps(m1, dst + kTile)));
      }
    }
    tiles = nullptr;
  }
};

// W rows per task of a plain product: a group of up to kMaxGroupBlocks blocks of 32 rows whose
// packed copy (all of k) stays in L2 while every x block pair passes over it.
constexpr int64_t kMaxGroupBlocks = 4;
constexpr int64_t kGroupBytes = int64_t{1} << 20;

int64_t GroupBlocks(int64_t kp) {
  const int64_t block_bytes = kBlockRows * kp * static_cast<int64_t>(sizeof(uint16_t));
  return std::clamp<int64_t>(kGroupBytes / block_bytes, 1, kMaxGroupBlocks);
}

// W rows per task of a GLU pair: its blocks are packed one at a time (the next one prefetched
// meanwhile), so a task may be long; the first block of a task is the one read unprefetched.
constexpr int64_t kGluTaskBlocks = 8;

// W rows [j0, j0 + 32·blocks) packed, block after block (32 × kp bf16 each), into this thread's
// buffer `slot`.
STRATA_TARGET_AMX const uint16_t* PackWBlocks(const MatmulWeights& w, int64_t kp, int64_t j0,
                                              int64_t blocks, int slot) {
  thread_local AlignedBuffer packed_w[2];
  const int64_t block_elems = kBlockRows * kp;
  const size_t bytes = static_cast<size_t>(blocks * block_elems) * sizeof(uint16_t);
  AlignedBuffer& buffer = packed_w[slot];
  if (buffer.size() < bytes) buffer = AlignedBuffer(bytes, AlignedBuffer::Fill::kUninitialized);
  auto* a = static_cast<uint16_t*>(buffer.data());
  for (int64_t g = 0; g < blocks; ++g) {
    if (w.format == WeightFormat::kMxfp4 || w.format == WeightFormat::kInt8) {
      PackWSliceDecoded(w, j0 + g * kBlockRows, 0, kp, a + g * block_elems);
    } else {
      PackWSlice(static_cast<const uint16_t*>(w.data), w.n, w.k, j0 + g * kBlockRows, 0, kp,
                 a + g * block_elems);
    }
  }
  return a;
}

// W rows [jb, jb + 32) as an A operand: read in place where the rows were prefetched and that is
// possible (bf16, k % 32 == 0, all 32 rows present), else packed into this thread's buffer `slot`
// (a sequential copy, which the hardware prefetcher follows; tile loads straight from DRAM would
// wait on every line).
STRATA_TARGET_AMX WBlock BlockOf(const MatmulWeights& w, int64_t kp, int64_t jb, bool prefetched,
                                 int slot) {
  if (prefetched && w.format == WeightFormat::kBf16 && w.k % kStepK == 0 &&
      jb + kBlockRows <= w.n) {
    return WBlock::InPlace(static_cast<const uint16_t*>(w.data), w.k, jb);
  }
  return WBlock::Packed(PackWBlocks(w, kp, jb, 1, slot));
}

// Task body of a plain product: W rows [j0, j0 + 32·blocks) against all m x rows (packed blocks
// from xp), stored into y [m, w.n].
STRATA_TARGET_AMX void RunGroup(const MatmulWeights& w, const uint32_t* xp, int64_t kp, int64_t m,
                                int64_t j0, int64_t blocks, float* y) {
  const uint16_t* a = PackWBlocks(w, kp, j0, blocks, 0);
  const int64_t block_elems = kBlockRows * kp;
  alignas(64) TileBlock out[2];
  PendingStore pending;
  const int64_t x_block_elems = kp / 2 * kTile;  // uint32 words per 16-row x block
  const int64_t steps = kp / kStepK;
  int buffer = 0;
  ConfigureAmxTiles16x64();
  for (int64_t i0 = 0; i0 < m; i0 += kBlockRows) {
    const uint32_t* b0 = xp + i0 / kTile * x_block_elems;
    for (int64_t g = 0; g < blocks; ++g) {
      BlockProducts(WBlock::Packed(a + g * block_elems), b0, b0 + x_block_elems, steps, out[buffer],
                    [&] { pending.Flush(); });
      const int64_t jb = j0 + g * kBlockRows;
      pending = {&out[buffer], y + i0 * w.n + jb, w.n, std::min<int64_t>(kBlockRows, m - i0),
                 std::min<int64_t>(kBlockRows, w.n - jb)};
      buffer ^= 1;
    }
  }
  pending.Flush();
  _tile_release();
}

// Task body of a GLU pair: gate and up rows [j0, j0 + 32·blocks) against all m x rows, h [m, n]
// ← act(gate) ⊙ cap(up) for those columns. Block by block (the x rows, ≤ a few hundred at MoE
// sizes, stay in L2), the next block's rows prefetched during this one's products.
STRATA_TARGET_AMX void RunGluGroup(const MatmulWeights& gate_w, const MatmulWeights& up_w,
                                   const uint32_t* xp, int64_t kp, int64_t m, int64_t j0,
                                   int64_t blocks, const GluParams& act, float* h) {
  const int64_t n = gate_w.n;
  alignas(64) TileBlock out[2][2];  // [buffer][gate, up]
  PendingGlu pending;
  LinePrefetcher prefetch;
  const int64_t x_block_elems = kp / 2 * kTile;
  const int64_t steps = kp / kStepK;
  const int64_t pairs = RoundUp(m, kBlockRows) / kBlockRows;
  int buffer = 0;
  ConfigureAmxTiles16x64();
  for (int64_t g = 0; g < blocks; ++g) {
    const int64_t jb = j0 + g * kBlockRows;
    const WBlock gate = BlockOf(gate_w, kp, jb, g > 0, 0);
    const WBlock up = BlockOf(up_w, kp, jb, g > 0, 1);
    prefetch.Clear();
    if (g + 1 < blocks) {
      AddWeightRows(gate_w, jb + kBlockRows, jb + 2 * kBlockRows, prefetch);
      AddWeightRows(up_w, jb + kBlockRows, jb + 2 * kBlockRows, prefetch);
    }
    prefetch.Plan(2 * pairs * steps);
    for (int64_t i0 = 0; i0 < m; i0 += kBlockRows) {
      const uint32_t* b0 = xp + i0 / kTile * x_block_elems;
      const uint32_t* b1 = b0 + x_block_elems;
      BlockProducts(
          gate, b0, b1, steps, out[buffer][0], [&] { pending.Flush(); }, &prefetch);
      BlockProducts(
          up, b0, b1, steps, out[buffer][1], [] {}, &prefetch);
      pending = {&out[buffer][0],
                 &out[buffer][1],
                 h + i0 * n + jb,
                 n,
                 std::min<int64_t>(kBlockRows, m - i0),
                 std::min<int64_t>(kBlockRows, n - jb),
                 &act};
      buffer ^= 1;
    }
  }
  pending.Flush();
  _tile_release();
}

// One product of a batch: y [m, w.n] = x·Wᵀ, or with `up` (a GLU pair, same shape) y = h =
// act(x·Wᵀ) ⊙ cap(x·upᵀ); x packed (PackXForAmxInto) at xp.
struct AmxProduct {
  MatmulWeights w;
  const MatmulWeights* up = nullptr;
  const uint32_t* xp = nullptr;
  int64_t m = 0;
  float* y = nullptr;
};

// 32-row W blocks per task of a product.
int64_t TaskBlocks(const AmxProduct& q, int64_t kp) {
  return q.up != nullptr ? kGluTaskBlocks : GroupBlocks(kp);
}

// Every product's weight block groups as the tasks of one parallel loop.
void MatmulAmxBf16Batch(const AmxProduct* products, int64_t count, const GluParams* act) {
  CHECK(AmxBf16Usable()) << "MatmulAmxBf16 needs AMX-BF16";
  // Products by rows, most first (stable): the threads take tasks in order, so a long one (a
  // shared expert's 512 rows among experts' 64) must not come last and leave the others idle.
  // Task t of the i-th product in that order covers its W block group t − first_task[i].
  thread_local std::vector<int64_t> order_buffer, first_task_buffer;
  std::vector<int64_t>& order = order_buffer;  // the tasks see this thread's
  std::vector<int64_t>& first_task = first_task_buffer;
  order.resize(static_cast<size_t>(count));
  for (int64_t p = 0; p < count; ++p) order[p] = p;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return products[a].m > products[b].m; });
  first_task.assign(static_cast<size_t>(count) + 1, 0);
  int64_t weight_bytes = 0, macs = 0;
  for (int64_t i = 0; i < count; ++i) {
    const AmxProduct& q = products[order[i]];
    CHECK(q.w.format != WeightFormat::kF32) << "MatmulAmxBf16 takes bf16, MXFP4 or int8 weights";
    const int matrices = q.up != nullptr ? 2 : 1;
    int64_t tasks = 0;
    if (q.m > 0 && q.w.n > 0) {
      const int64_t kp = RoundUp(std::max<int64_t>(q.w.k, 1), kStepK);
      tasks = (RoundUp(q.w.n, kBlockRows) / kBlockRows + TaskBlocks(q, kp) - 1) / TaskBlocks(q, kp);
      weight_bytes += matrices * q.w.n * kp * static_cast<int64_t>(sizeof(uint16_t));
      macs += matrices * q.m * q.w.n * q.w.k;
    }
    first_task[i + 1] = first_task[i] + tasks;
  }
  const bool parallel = weight_bytes >= kParallelMinWeightBytes || macs >= kParallelMinMacs;
  ParallelFor(first_task[count], parallel, [&](int64_t t) {
    const int64_t i =
        std::upper_bound(first_task.begin(), first_task.end(), t) - first_task.begin() - 1;
    const AmxProduct& q = products[order[i]];
    const int64_t kp = RoundUp(std::max<int64_t>(q.w.k, 1), kStepK);
    const int64_t group = TaskBlocks(q, kp);
    const int64_t blocks = RoundUp(q.w.n, kBlockRows) / kBlockRows;
    const int64_t first = (t - first_task[i]) * group;
    const int64_t j0 = first * kBlockRows, count_blocks = std::min(group, blocks - first);
    if (q.up != nullptr) {
      RunGluGroup(q.w, *q.up, q.xp, kp, q.m, j0, count_blocks, *act, q.y);
    } else {
      RunGroup(q.w, q.xp, kp, q.m, j0, count_blocks, q.y);
    }
  });
}

}  // namespace

int64_t PackedXForAmxWords(int64_t k, int64_t m) {
  return RoundUp(m, kBlockRows) * RoundUp(std::max<int64_t>(k, 1), kStepK) / 2;
}

namespace {

template <typename T>
void PackXForAmxRows(const T* x, int64_t k, const int64_t* rows, int64_t m, uint32_t* xp) {
  CHECK(ActiveIsa() == Isa::kAvx512Bf16) << "PackXForAmxInto needs AVX512-BF16";
  ParallelFor(RoundUp(m, kBlockRows) / kTile, m * k >= (int64_t{1} << 16),
              [&](int64_t b) { PackXBlockAt(x, k, rows, m, b, xp); });
}

}  // namespace

void PackXForAmxInto(const float* x, int64_t k, const int64_t* rows, int64_t m, uint32_t* xp) {
  PackXForAmxRows(x, k, rows, m, xp);
}

void PackXForAmxInto(const uint16_t* x, int64_t k, const int64_t* rows, int64_t m, uint32_t* xp) {
  PackXForAmxRows(x, k, rows, m, xp);
}

bool AmxBf16Usable() { return GetCpuFeatures().amx_bf16 && ActiveIsa() == Isa::kAvx512Bf16; }

void MatmulAmxBf16Glu(const GluGroup* groups, int64_t count, const GluParams& act) {
  thread_local AlignedBuffer packed;
  thread_local std::vector<AmxProduct> products_buffer;
  thread_local std::vector<int64_t> first_block_buffer, first_word_buffer;
  // The tasks below see this thread's buffers (a thread_local named in them is the worker's).
  std::vector<AmxProduct>& products = products_buffer;
  std::vector<int64_t>& first_block = first_block_buffer;  // group gi's first 16-row x block
  std::vector<int64_t>& first_word = first_word_buffer;    // and its packed x's first word
  first_block.assign(static_cast<size_t>(count) + 1, 0);
  first_word.assign(static_cast<size_t>(count) + 1, 0);
  for (int64_t gi = 0; gi < count; ++gi) {
    const GluGroup& g = groups[gi];
    CHECK(g.gate.k == g.up.k && g.gate.n == g.up.n && g.gate.format == g.up.format)
        << "gate and up must have the same format and shape";
    first_word[gi + 1] = first_word[gi] + PackedXForAmxWords(g.gate.k, g.m);
    first_block[gi + 1] = first_block[gi] + RoundUp(g.m, kBlockRows) / kTile;
  }
  const int64_t words = first_word[count];
  const size_t bytes = static_cast<size_t>(words) * sizeof(uint32_t);
  if (packed.size() < bytes) packed = AlignedBuffer(bytes, AlignedBuffer::Fill::kUninitialized);
  uint32_t* const xp = static_cast<uint32_t*>(packed.data());
  products.clear();
  for (int64_t gi = 0; gi < count; ++gi) {
    const GluGroup& g = groups[gi];
    products.push_back({g.gate, &g.up, xp + first_word[gi], g.m, g.h});
  }
  // Every group's x rows (gathered) in one parallel loop over their 16-row blocks.
  const int64_t total_blocks = first_block[count];
  ParallelFor(total_blocks, total_blocks > 1 && words >= (int64_t{1} << 15), [&](int64_t b) {
    const int64_t gi =
        std::upper_bound(first_block.begin(), first_block.end(), b) - first_block.begin() - 1;
    const GluGroup& g = groups[gi];
    PackXBlockAt(g.x, g.gate.k, g.rows, g.m, b - first_block[gi], xp + first_word[gi]);
  });
  MatmulAmxBf16Batch(products.data(), count, &act);
}

STRATA_TARGET_AMX void AmxScatterAddColumns(const MatmulWeights& w, const uint32_t* xp, int64_t m,
                                            const int64_t* rows, const float* scale, int64_t j0,
                                            int64_t j1, int64_t ldy, float* y, bool prefetched,
                                            const AmxPrefetchNext& next) {
  CHECK_EQ(j0 % kBlockRows, 0) << "AMX scatter-add column blocks start at multiples of 32";
  if (m <= 0 || j1 <= j0) return;
  const int64_t kp = RoundUp(std::max<int64_t>(w.k, 1), kStepK);
  const int64_t x_block_elems = kp / 2 * kTile;
  const int64_t steps = kp / kStepK;
  const int64_t blocks = RoundUp(j1 - j0, kBlockRows) / kBlockRows;
  const int64_t pairs = RoundUp(m, kBlockRows) / kBlockRows;
  LinePrefetcher prefetch;
  if (next.w != nullptr) AddWeightRows(*next.w, j0, j1, prefetch);
  prefetch.Add(next.xp, next.xp_words * static_cast<int64_t>(sizeof(uint32_t)));
  prefetch.Plan(blocks * pairs * steps);
  alignas(64) TileBlock out[2];
  PendingScatterAdd pending;
  int buffer = 0;
  ConfigureAmxTiles16x64();
  for (int64_t g = 0; g < blocks; ++g) {
    const int64_t jb = j0 + g * kBlockRows;
    const WBlock a = BlockOf(w, kp, jb, prefetched, 0);
    for (int64_t i0 = 0; i0 < m; i0 += kBlockRows) {
      const uint32_t* b0 = xp + i0 / kTile * x_block_elems;
      BlockProducts(
          a, b0, b0 + x_block_elems, steps, out[buffer], [&] { pending.Flush(); }, &prefetch);
      pending = {&out[buffer],
                 y,
                 ldy,
                 jb,
                 rows,
                 scale,
                 i0,
                 std::min<int64_t>(kBlockRows, m - i0),
                 std::min<int64_t>(kBlockRows, j1 - jb)};
      buffer ^= 1;
    }
  }
  pending.Flush();
  _tile_release();
}

void MatmulAmxBf16(const MatmulWeights& w, const float* x, int64_t m, float* y) {
  thread_local AlignedBuffer buffer;
  const size_t bytes = static_cast<size_t>(PackedXForAmxWords(w.k, m)) * sizeof(uint32_t);
  if (buffer.size() < bytes) buffer = AlignedBuffer(bytes, AlignedBuffer::Fill::kUninitialized);
  auto* xp = static_cast<uint32_t*>(buffer.data());
  PackXForAmxInto(x, w.k, nullptr, m, xp);
  const AmxProduct product{w, nullptr, xp, m, y};
  MatmulAmxBf16Batch(&product, 1, nullptr);
}

}  // namespace strata::kernels::cpu::internal
