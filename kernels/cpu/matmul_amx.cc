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
#include <algorithm>
#include <vector>

#include "core/amx.h"
#include "core/avx512_intrinsics.h"
#include "core/check.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/internal/amx_tiles.h"
#include "kernels/cpu/internal/matmul_tiles.h"
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

// The same slice of MXFP4 rows, decoded to bf16 (exact): one 32-element block per k step.
static_assert(kStepK == kMxfp4BlockSize);
void PackWSliceMxfp4(const MatmulWeights& w, int64_t j0, int64_t k0, int64_t k1, uint16_t* slice) {
  const int64_t blocks = (std::min(k1, w.k) - k0) / kStepK;
  const auto* packed = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < kBlockRows; ++r) {
    uint16_t* dst = slice + r * kStepK;
    if (j0 + r >= w.n) {
      for (int64_t b = 0; b < (k1 - k0) / kStepK; ++b) {
        std::fill(dst + b * kBlockRows * kStepK, dst + b * kBlockRows * kStepK + kStepK, 0);
      }
      continue;
    }
    DecodeMxfp4RowBf16(packed + (j0 + r) * (w.k / 2) + k0 / 2,
                       w.scales + (j0 + r) * (w.k / kStepK) + k0 / kStepK, blocks,
                       kBlockRows * kStepK, dst);
  }
}

// The four tiles of a 2 × 2 block (tile q: W rows 16·(q / 2) .., x rows 16·(q % 2) ..) stored
// transposed into y: `rows` x rows × `cols` W rows from yb (row stride ldy).
struct PendingStore {
  const float (*tiles)[kTile * kTile] = nullptr;
  float* yb = nullptr;
  int64_t rows = 0, cols = 0;

  STRATA_TARGET_AMX void Flush(int64_t ldy) {
    if (tiles == nullptr) return;
    const int64_t r0 = std::min<int64_t>(kTile, rows), r1 = rows - r0;
    const int64_t c0 = std::min<int64_t>(kTile, cols), c1 = cols - c0;
    StoreTransposed(tiles[0], yb, ldy, r0, c0);
    StoreTransposed(tiles[2], yb + kTile, ldy, r0, c1);
    StoreTransposed(tiles[1], yb + kTile * ldy, ldy, r1, c0);
    StoreTransposed(tiles[3], yb + kTile * ldy + kTile, ldy, r1, c1);
    tiles = nullptr;
  }
};

// W rows per task: a group of up to kMaxGroupBlocks blocks of 32 rows whose packed copy (all of
// k) stays in L2 while every x block pair passes over it.
constexpr int64_t kMaxGroupBlocks = 4;
constexpr int64_t kGroupBytes = int64_t{1} << 20;

int64_t GroupBlocks(int64_t kp) {
  const int64_t block_bytes = kBlockRows * kp * static_cast<int64_t>(sizeof(uint16_t));
  return std::clamp<int64_t>(kGroupBytes / block_bytes, 1, kMaxGroupBlocks);
}

// Task body: W rows [j0, j0 + 32·blocks) against all m x rows (packed blocks from xp): the group
// packed once, then for every pair of x blocks, every 32-row block of the group over all of k.
STRATA_TARGET_AMX void RunGroup(const MatmulWeights& w, const uint32_t* xp, int64_t kp, int64_t m,
                                int64_t j0, int64_t blocks, float* y) {
  thread_local AlignedBuffer packed_w;
  const int64_t block_elems = kBlockRows * kp;  // bf16 per packed 32-row block
  const size_t bytes = static_cast<size_t>(blocks * block_elems) * sizeof(uint16_t);
  if (packed_w.size() < bytes) packed_w = AlignedBuffer(bytes, AlignedBuffer::Fill::kUninitialized);
  auto* a = static_cast<uint16_t*>(packed_w.data());
  const auto* wd = static_cast<const uint16_t*>(w.data);
  for (int64_t g = 0; g < blocks; ++g) {
    if (w.format == WeightFormat::kMxfp4) {
      PackWSliceMxfp4(w, j0 + g * kBlockRows, 0, kp, a + g * block_elems);
    } else {
      PackWSlice(wd, w.n, w.k, j0 + g * kBlockRows, 0, kp, a + g * block_elems);
    }
  }
  // A finished 2 × 2 block waits in `out` until the next block's products run: its transposes
  // (AVX-512) then overlap those (AMX) instead of stalling the tile unit.
  alignas(64) float out[2][4][kTile * kTile];
  PendingStore pending;
  const int64_t x_block_elems = kp / 2 * kTile;  // uint32 words per 16-row x block
  const int64_t steps = kp / kStepK;
  int buffer = 0;
  ConfigureAmxTiles16x64();
  for (int64_t i0 = 0; i0 < m; i0 += kBlockRows) {
    const uint32_t* b0 = xp + i0 / kTile * x_block_elems;
    const uint32_t* b1 = b0 + x_block_elems;
    for (int64_t g = 0; g < blocks; ++g) {
      const uint16_t* slice = a + g * block_elems;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      // tiles 4, 5: W rows +0 .. +15 and +16 .. +31 of the block; 6, 7: the two x blocks.
      _tile_loadd(4, slice, 64);
      _tile_loadd(5, slice + kTile * kStepK, 64);
      _tile_loadd(6, b0, 64);
      _tile_loadd(7, b1, 64);
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t next = std::min(s + 1, steps - 1);  // the last step reloads its own
        const uint16_t* a_next = slice + next * kBlockRows * kStepK;
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(4, a_next, 64);
        _tile_dpbf16ps(2, 5, 6);
        _tile_loadd(6, b0 + next * kTile * kTile, 64);
        _tile_dpbf16ps(3, 5, 7);
        _tile_loadd(5, a_next + kTile * kStepK, 64);
        _tile_loadd(7, b1 + next * kTile * kTile, 64);
        if (s == 0) pending.Flush(w.n);
      }
      float(*o)[kTile * kTile] = out[buffer];
      _tile_stored(0, o[0], 64);
      _tile_stored(1, o[1], 64);
      _tile_stored(2, o[2], 64);
      _tile_stored(3, o[3], 64);
      const int64_t jb = j0 + g * kBlockRows;
      pending = {o, y + i0 * w.n + jb, std::min<int64_t>(kBlockRows, m - i0),
                 std::min<int64_t>(kBlockRows, w.n - jb)};
      buffer ^= 1;
    }
  }
  pending.Flush(w.n);
  _tile_release();
}

// Every product's weight block groups as the tasks of one parallel loop.
void MatmulAmxBf16Batch(const AmxProduct* products, int64_t count) {
  CHECK(AmxBf16Usable()) << "MatmulAmxBf16 needs AMX-BF16";
  // Task t of product p covers its W block group t − first_task[p].
  thread_local std::vector<int64_t> first_task_buffer;
  std::vector<int64_t>& first_task = first_task_buffer;  // the tasks see this thread's
  first_task.assign(static_cast<size_t>(count) + 1, 0);
  int64_t weight_bytes = 0, macs = 0;
  for (int64_t p = 0; p < count; ++p) {
    const AmxProduct& q = products[p];
    CHECK(q.w.format != WeightFormat::kF32) << "MatmulAmxBf16 takes bf16 or MXFP4 weights";
    int64_t tasks = 0;
    if (q.m > 0 && q.w.n > 0) {
      const int64_t kp = RoundUp(std::max<int64_t>(q.w.k, 1), kStepK);
      const int64_t group = GroupBlocks(kp);
      tasks = (RoundUp(q.w.n, kBlockRows) / kBlockRows + group - 1) / group;
      weight_bytes += q.w.n * kp * static_cast<int64_t>(sizeof(uint16_t));
      macs += q.m * q.w.n * q.w.k;
    }
    first_task[p + 1] = first_task[p] + tasks;
  }
  const bool parallel = weight_bytes >= kParallelMinWeightBytes || macs >= kParallelMinMacs;
  ParallelFor(first_task[count], parallel, [&](int64_t t) {
    const int64_t p =
        std::upper_bound(first_task.begin(), first_task.end(), t) - first_task.begin() - 1;
    const AmxProduct& q = products[p];
    const int64_t kp = RoundUp(std::max<int64_t>(q.w.k, 1), kStepK);
    const int64_t group = GroupBlocks(kp);
    const int64_t blocks = RoundUp(q.w.n, kBlockRows) / kBlockRows;
    const int64_t first = (t - first_task[p]) * group;
    RunGroup(q.w, q.xp, kp, q.m, first * kBlockRows, std::min(group, blocks - first), q.y);
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
  const int64_t kp = RoundUp(std::max<int64_t>(k, 1), kStepK);
  ParallelFor(RoundUp(m, kBlockRows) / kTile, m * k >= (int64_t{1} << 16), [&](int64_t b) {
    thread_local AlignedBuffer rows_buffer;
    const size_t row_bytes = static_cast<size_t>(kTile * kp) * sizeof(uint16_t);
    if (rows_buffer.size() < row_bytes) rows_buffer = AlignedBuffer(row_bytes);
    PackXBlock(x, k, rows, b * kTile, m, kp, static_cast<uint16_t*>(rows_buffer.data()),
               xp + b * kp / 2 * kTile);
  });
}

}  // namespace

void PackXForAmxInto(const float* x, int64_t k, const int64_t* rows, int64_t m, uint32_t* xp) {
  PackXForAmxRows(x, k, rows, m, xp);
}

void PackXForAmxInto(const uint16_t* x, int64_t k, const int64_t* rows, int64_t m, uint32_t* xp) {
  PackXForAmxRows(x, k, rows, m, xp);
}

bool AmxBf16Usable() { return GetCpuFeatures().amx_bf16 && ActiveIsa() == Isa::kAvx512Bf16; }

const std::vector<AmxProduct>& MatmulAmxBf16Groups(const AmxGroup* groups, int64_t count) {
  thread_local AlignedBuffer packed;
  thread_local std::vector<float> out;
  thread_local std::vector<AmxProduct> products;
  int64_t words = 0, floats = 0;
  for (int64_t gi = 0; gi < count; ++gi) {
    const AmxGroup& g = groups[gi];
    words += PackedXForAmxWords(g.k, g.m);
    for (int q = 0; q < g.num_weights; ++q) floats += g.m * g.weights[q].n;
  }
  const size_t bytes = static_cast<size_t>(words) * sizeof(uint32_t);
  if (packed.size() < bytes) packed = AlignedBuffer(bytes, AlignedBuffer::Fill::kUninitialized);
  out.resize(static_cast<size_t>(floats));
  products.clear();
  auto* xp = static_cast<uint32_t*>(packed.data());
  float* y = out.data();
  for (int64_t gi = 0; gi < count; ++gi) {
    const AmxGroup& g = groups[gi];
    PackXForAmxInto(g.x, g.k, g.rows, g.m, xp);
    for (int q = 0; q < g.num_weights; ++q) {
      CHECK_EQ(g.weights[q].k, g.k) << "every weight of an AMX group multiplies its x";
      products.push_back({g.weights[q], xp, g.m, y});
      y += g.m * g.weights[q].n;
    }
    xp += PackedXForAmxWords(g.k, g.m);
  }
  MatmulAmxBf16Batch(products.data(), static_cast<int64_t>(products.size()));
  return products;
}

void MatmulAmxBf16(const MatmulWeights& w, const float* x, int64_t m, float* y) {
  thread_local AlignedBuffer buffer;
  const size_t bytes = static_cast<size_t>(PackedXForAmxWords(w.k, m)) * sizeof(uint32_t);
  if (buffer.size() < bytes) buffer = AlignedBuffer(bytes, AlignedBuffer::Fill::kUninitialized);
  auto* xp = static_cast<uint32_t*>(buffer.data());
  PackXForAmxInto(x, w.k, nullptr, m, xp);
  const AmxProduct product{w, xp, m, y};
  MatmulAmxBf16Batch(&product, 1);
}

}  // namespace strata::kernels::cpu::internal
