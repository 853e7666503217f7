// Matmul(): kernel choice, activation layout, and the OpenMP task loop over register tiles.
//
// Work split (one task = a chunk of x rows × a block of W rows, all of k):
//
//            k →                          for each group of nr W rows in the block:
//   W  [ block 0 ] ── task (c, 0)            for each 1024-wide k block:
//      [ block 1 ] ── task (c, 1)              (MXFP4, many rows: decode nr × 1024 to f32)
//      [  ...    ]                             for each group of mr x rows in the chunk:
//                                                 tile(mr, nr, k block)
//
// The nr W rows × 1024 k slice (8 KB bf16) stays in L1 while every x group of the chunk passes
// over it, so each weight byte comes from DRAM once per chunk; chunks hold all of m up to
// 64 rows (bounded so that a chunk of x stays in L2), so a decode step reads W exactly once.
#include "kernels/cpu/matmul.h"

#include <omp.h>

#include <algorithm>

#include "core/check.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/reference/matmul.h"

namespace strata::kernels::cpu {
namespace {

using internal::kKBlock;
using internal::PackRowFn;
using internal::TileArgs;
using internal::TileKernels;
using internal::XLayout;

constexpr int64_t kTaskWeightBytes = int64_t{128} << 10;  // W bytes per task (≈ 3 µs of DRAM)
constexpr int64_t kChunkXBytes = int64_t{512} << 10;      // x bytes per chunk (half of L2)
constexpr int64_t kMaxChunkRows = 64;
// Below both, one thread beats a fork/join: waking a sleeping OpenMP team costs ~10–20 µs (the
// bench preset's 256 × 1024 bf16 experts, 512 KB: 8 µs on one thread, 22 µs on two).
constexpr int64_t kParallelMinWeightBytes = int64_t{768} << 10;
constexpr int64_t kParallelMinMacs = int64_t{1} << 21;

struct KernelSet {
  const TileKernels* tiles = nullptr;      // the format's own tiles
  const TileKernels* f32_tiles = nullptr;  // MXFP4 scratch path
  internal::DecodeFn decode = nullptr;     // MXFP4 scratch path
};

// nullptr tiles: no kernel for this ISA (the caller uses the reference).
KernelSet SelectKernels(Isa isa, WeightFormat format, bool lossy_bf16) {
  const bool avx512 = isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16;
  if (isa == Isa::kScalar) return {};
  if (lossy_bf16) {
    CHECK(isa == Isa::kAvx512Bf16 && format == WeightFormat::kBf16);
    return {&internal::Bf16DotLossyTilesAvx512Bf16()};
  }
  switch (format) {
    case WeightFormat::kF32:
      return {avx512 ? &internal::F32TilesAvx512() : &internal::F32TilesAvx2()};
    case WeightFormat::kBf16:
      return {avx512 ? &internal::Bf16TilesAvx512() : &internal::Bf16TilesAvx2()};
    case WeightFormat::kMxfp4:
      if (avx512) {
        return {&internal::Mxfp4TilesAvx512(), &internal::F32TilesAvx512(),
                &internal::DecodeMxfp4TileAvx512};
      }
      return {&internal::Mxfp4TilesAvx2(), &internal::F32TilesAvx2(),
              &internal::DecodeMxfp4TileAvx2};
  }
  return {};
}

// A per-thread buffer that only grows (no allocation once warm).
void* ThreadWorkspace(size_t num_bytes) {
  thread_local AlignedBuffer buffer;
  if (buffer.size() < num_bytes) buffer = AlignedBuffer(num_bytes + num_bytes / 4);
  return buffer.data();
}

struct XOperand {
  const void* data;
  int64_t ldx;  // elements
};

// x in the layout the tiles expect (see internal/matmul_tiles.h), rows zero-padded to a multiple
// of x_block, in the calling thread's workspace. Rows are packed in parallel when there are many.
XOperand PrepareX(const TileKernels& kernels, const float* x, int64_t m, int64_t k) {
  if (kernels.x_layout == XLayout::kNatural) return {x, k};
  const int64_t ldx = (k + kernels.x_block - 1) / kernels.x_block * kernels.x_block;
  const size_t elem = kernels.x_layout == XLayout::kBf16 ? 2 : 4;
  char* out = static_cast<char*>(ThreadWorkspace(static_cast<size_t>(m * ldx) * elem));
  const PackRowFn pack = kernels.pack_row;
#pragma omp parallel for schedule(static) if (m * k >= (int64_t{1} << 18))
  for (int64_t i = 0; i < m; ++i) pack(x + i * k, k, out + i * ldx * elem);
  return {out, ldx};
}

struct Problem {
  MatmulWeights w;
  KernelSet kernels;
  XOperand x;
  int64_t m;
  float* y;
  bool decode_to_scratch;  // MXFP4 with more than one x group per chunk
};

// Pointer to W[j, k0] and its scales for the format; ldw in elements (bytes for MXFP4).
void WeightAt(const MatmulWeights& w, int64_t j, int64_t k0, TileArgs& t) {
  switch (w.format) {
    case WeightFormat::kF32:
      t.w = static_cast<const float*>(w.data) + j * w.k + k0;
      t.ldw = w.k;
      return;
    case WeightFormat::kBf16:
      t.w = static_cast<const uint16_t*>(w.data) + j * w.k + k0;
      t.ldw = w.k;
      return;
    case WeightFormat::kMxfp4:
      t.w = static_cast<const uint8_t*>(w.data) + j * (w.k / 2) + k0 / 2;
      t.ldw = w.k / 2;
      t.scales = w.scales + j * (w.k / kMxfp4BlockSize) + k0 / kMxfp4BlockSize;
      t.lds = w.k / kMxfp4BlockSize;
      return;
  }
}

// y[i0:i1, j0:j1] for all of k.
void RunTask(const Problem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const TileKernels& own = *p.kernels.tiles;
  const TileKernels& tiles = p.decode_to_scratch ? *p.kernels.f32_tiles : own;
  const int mr_max = own.mr_max, nr_max = own.nr_max;
  alignas(64) float scratch[internal::kMaxTileCols * kKBlock];
  const size_t x_elem = own.x_layout == XLayout::kBf16 ? 2 : 4;
  for (int64_t j = j0; j < j1; j += nr_max) {
    const int nr = static_cast<int>(std::min<int64_t>(nr_max, j1 - j));
    for (int64_t k0 = 0; k0 < p.w.k; k0 += kKBlock) {
      TileArgs t{};
      t.kc = std::min(kKBlock, p.w.k - k0);
      t.ldx = p.x.ldx;
      t.ldy = p.w.n;
      t.accumulate = k0 > 0;
      WeightAt(p.w, j, k0, t);
      if (p.decode_to_scratch) {
        p.kernels.decode(static_cast<const uint8_t*>(t.w), t.ldw, t.scales, t.lds, nr, t.kc,
                         scratch);
        t.w = scratch;
        t.ldw = t.kc;
      }
      // The slice after this one: the next k block of these rows, else the next rows' first.
      TileArgs next{};
      if (k0 + kKBlock < p.w.k) {
        WeightAt(p.w, j, k0 + kKBlock, next);
      } else if (j + nr_max < j1) {
        WeightAt(p.w, j + nr_max, 0, next);
      }
      for (int64_t i = i0; i < i1; i += mr_max) {
        const int mr = static_cast<int>(std::min<int64_t>(mr_max, i1 - i));
        t.w_next = i == i0 && !p.decode_to_scratch ? next.w : nullptr;
        t.x = static_cast<const char*>(p.x.data) + (i * p.x.ldx + k0) * x_elem;
        t.y = p.y + i * p.w.n + j;
        tiles.tiles[mr - 1][nr - 1](t);
      }
    }
  }
}

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

void RunTiles(const MatmulWeights& w, const KernelSet& kernels, const float* x, int64_t m,
              float* y) {
  const TileKernels& own = *kernels.tiles;
  Problem p{w, kernels, PrepareX(own, x, m, w.k), m, y, false};
  const int64_t x_row_bytes = std::max<int64_t>(p.x.ldx * 4, 1);
  const int64_t chunk_rows = std::clamp<int64_t>(
      kChunkXBytes / x_row_bytes / own.mr_max * own.mr_max, own.mr_max, kMaxChunkRows);
  p.decode_to_scratch = w.format == WeightFormat::kMxfp4 && std::min(m, chunk_rows) > own.mr_max;
  const int64_t num_chunks = (m + chunk_rows - 1) / chunk_rows;

  const int num_threads = omp_get_max_threads();
  const int64_t row_bytes = std::max<int64_t>(w.format == WeightFormat::kMxfp4
                                                  ? w.k / 2 + w.k / 32
                                                  : w.k * (w.format == WeightFormat::kF32 ? 4 : 2),
                                              1);
  int64_t block_rows = RoundUp(std::max<int64_t>(kTaskWeightBytes / row_bytes, 1), own.nr_max);
  // At least ~4 tasks per thread when the matrix allows it (load balance on a shared machine).
  const int64_t min_tasks = 4 * int64_t{num_threads};
  if (num_chunks * ((w.n + block_rows - 1) / block_rows) < min_tasks) {
    block_rows = std::max<int64_t>(
        own.nr_max, RoundUp((w.n * num_chunks + min_tasks - 1) / min_tasks, own.nr_max));
  }
  const int64_t num_blocks = (w.n + block_rows - 1) / block_rows;
  const int64_t num_tasks = num_chunks * num_blocks;
  const bool parallel =
      num_threads > 1 && num_tasks > 1 &&
      (w.n * row_bytes >= kParallelMinWeightBytes || m * w.n * w.k >= kParallelMinMacs);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t task = 0; task < num_tasks; ++task) {
    const int64_t c = task % num_chunks, b = task / num_chunks;
    RunTask(p, c * chunk_rows, std::min(m, (c + 1) * chunk_rows), b * block_rows,
            std::min(w.n, (b + 1) * block_rows));
  }
}

void MatmulReferenceFallback(const MatmulWeights& w, const float* x, int64_t m, float* y) {
  switch (w.format) {
    case WeightFormat::kF32:
      MatmulReference(x, m, w.k, static_cast<const float*>(w.data), w.n, y);
      return;
    case WeightFormat::kBf16:
      MatmulBf16Reference(x, m, w.k, static_cast<const uint16_t*>(w.data), w.n, y);
      return;
    case WeightFormat::kMxfp4:
      MatmulMxfp4Reference(x, m, w.k, static_cast<const uint8_t*>(w.data), w.scales, w.n, y);
      return;
  }
}

}  // namespace

bool MatmulAlgoSupported(MatmulAlgo algo, WeightFormat format) {
  switch (algo) {
    case MatmulAlgo::kAuto:
    case MatmulAlgo::kOneDnn:
      return true;
    case MatmulAlgo::kStreaming:
      return ActiveIsa() != Isa::kScalar;
    case MatmulAlgo::kBf16DotLossy:
      return format == WeightFormat::kBf16 && ActiveIsa() == Isa::kAvx512Bf16;
  }
  return false;
}

void MatmulWithAlgo(MatmulAlgo algo, const MatmulWeights& w, const float* x, int64_t m, float* y) {
  CHECK_GE(m, 0);
  CHECK_GE(w.n, 0);
  CHECK_GE(w.k, 0);
  CHECK(w.data != nullptr || w.n * w.k == 0);
  if (w.format == WeightFormat::kMxfp4) {
    CHECK_EQ(w.k % kMxfp4BlockSize, 0) << "MXFP4 rows must hold whole 32-element blocks";
    CHECK(w.scales != nullptr || w.n * w.k == 0);
  }
  if (m == 0 || w.n == 0) return;
  if (w.k == 0) {
    std::fill(y, y + m * w.n, 0.0f);
    return;
  }
  CHECK(MatmulAlgoSupported(algo, w.format))
      << "matmul algorithm " << static_cast<int>(algo) << " unsupported here";
  if (algo == MatmulAlgo::kOneDnn) {
    internal::MatmulOneDnn(w, x, m, y);
    return;
  }
  const KernelSet kernels = SelectKernels(ActiveIsa(), w.format, algo == MatmulAlgo::kBf16DotLossy);
  if (kernels.tiles == nullptr) {
    MatmulReferenceFallback(w, x, m, y);
    return;
  }
  RunTiles(w, kernels, x, m, y);
}

void Matmul(const MatmulWeights& w, const float* x, int64_t m, float* y) {
  MatmulWithAlgo(MatmulAlgo::kAuto, w, x, m, y);
}

}  // namespace strata::kernels::cpu
