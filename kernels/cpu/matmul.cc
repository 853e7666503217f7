// Matmul(): the task loop over blocks of x rows × W rows (internal/matmul_driver.h runs a block).
//
// Work split (one task = a chunk of x rows × a block of W rows, all of k):
//
//            k →
//   W  [ block 0 ] ── task (c, 0)      chunks hold all of m up to 64 rows (bounded so that a
//      [ block 1 ] ── task (c, 1)      chunk of x stays in L2), so a decode step reads W once
//      [  ...    ]
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <atomic>

#include "core/check.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/cpu/internal/matmul_driver.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/reference/matmul.h"

namespace strata::kernels::cpu {
namespace {

using internal::KernelSet;
using internal::PackedX;
using internal::ScratchSlot;

// x packed in the calling thread's scratch (rows in parallel when there are many).
PackedX PrepareX(const internal::TileKernels& tiles, const float* x, int64_t m, int64_t k) {
  if (tiles.x_layout == internal::XLayout::kNatural) return {x, k};
  const int64_t ldx = internal::PackedRowElements(tiles, k);
  void* out = internal::ThreadScratch(
      ScratchSlot::kPackedX, static_cast<size_t>(m * ldx) * internal::PackedElementBytes(tiles));
  constexpr int64_t kRowsPerTask = 16;
  ParallelFor((m + kRowsPerTask - 1) / kRowsPerTask, m * k >= (int64_t{1} << 18), [&](int64_t t) {
    internal::PackRows(tiles, x, k, nullptr, t * kRowsPerTask, std::min(m, (t + 1) * kRowsPerTask),
                       out);
  });
  return {out, ldx};
}

void RunTiles(const MatmulWeights& w, const KernelSet& kernels, const float* x, int64_t m,
              float* y) {
  const internal::TileKernels& own = *kernels.tiles;
  const PackedX px = PrepareX(own, x, m, w.k);
  const int64_t chunk_rows = internal::ChunkRows(own, px.ldx);
  const bool scratch = internal::DecodeToScratch(kernels, w.format, std::min(m, chunk_rows));
  const int64_t num_chunks = (m + chunk_rows - 1) / chunk_rows;
  const int64_t row_bytes = std::max<int64_t>(internal::WeightRowBytes(w), 1);
  const int64_t block_cols =
      internal::BlockColumns(w.n, row_bytes, num_chunks, 4 * int64_t{MaxThreads()}, own.nr_max);
  const int64_t num_blocks = (w.n + block_cols - 1) / block_cols;
  const bool parallel = internal::WorthParallel(w.n * row_bytes, m * w.n * w.k);
  ParallelFor(num_chunks * num_blocks, parallel, [&](int64_t task) {
    const int64_t c = task % num_chunks, b = task / num_chunks;
    const int64_t i0 = c * chunk_rows, j0 = b * block_cols;
    internal::RunBlock(kernels, scratch, w, nullptr, px, i0, std::min(m, i0 + chunk_rows), j0,
                       std::min(w.n, j0 + block_cols), y + i0 * w.n + j0, w.n);
  });
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

std::atomic<MatmulPrecision> g_precision{MatmulPrecision::kF32};

}  // namespace

void SetMatmulPrecision(MatmulPrecision precision) {
  g_precision.store(precision, std::memory_order_relaxed);
}

MatmulPrecision GetMatmulPrecision() { return g_precision.load(std::memory_order_relaxed); }

bool Bf16MatmulSupported() { return ActiveIsa() == Isa::kAvx512Bf16; }

bool Bf16MatmulUsesAmx() { return internal::AmxBf16Usable(); }

const char* MatmulPrecisionInEffect() {
  if (GetMatmulPrecision() != MatmulPrecision::kBf16 || !Bf16MatmulSupported()) return "f32";
  return Bf16MatmulUsesAmx() ? "bf16-amx" : "bf16";
}

bool MatmulAlgoSupported(MatmulAlgo algo, WeightFormat format) {
  switch (algo) {
    case MatmulAlgo::kAuto:
    case MatmulAlgo::kOneDnn:
      return true;
    case MatmulAlgo::kStreaming:
      return ActiveIsa() != Isa::kScalar;
    case MatmulAlgo::kBf16DotLossy:
      return format != WeightFormat::kF32 && ActiveIsa() == Isa::kAvx512Bf16;
    case MatmulAlgo::kOneDnnBf16:
      return format == WeightFormat::kBf16 && ActiveIsa() == Isa::kAvx512Bf16;
    case MatmulAlgo::kAmxBf16:
      return format != WeightFormat::kF32 && internal::AmxBf16Usable();
  }
  return false;
}

void MatmulWithAlgo(MatmulAlgo algo, const MatmulWeights& w, const float* x, int64_t m, float* y) {
  CHECK_GE(m, 0);
  internal::CheckWeights(w);
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
  const Isa isa = ActiveIsa();
  if (algo == MatmulAlgo::kOneDnnBf16) {
    internal::MatmulOneDnnBf16(w, x, m, y);
    return;
  }
  if (algo == MatmulAlgo::kAmxBf16 ||
      (algo == MatmulAlgo::kAuto && internal::UseAmxProducts(isa, w.format, m))) {
    internal::MatmulAmxBf16(w, x, m, y);
    return;
  }
  const bool bf16_products =
      algo == MatmulAlgo::kBf16DotLossy ||
      (algo == MatmulAlgo::kAuto && internal::UseBf16Tiles(isa, w.format, m));
  const KernelSet kernels = internal::SelectKernels(isa, w.format, bf16_products);
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
