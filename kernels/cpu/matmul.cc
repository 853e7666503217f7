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
#include <cstdint>
#include <vector>

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

// Rows [0, m) of x packed into dst in the tiles' layout (rows in parallel when there are many).
void PackX(const internal::TileKernels& tiles, const float* x, int64_t m, int64_t k, void* dst) {
  constexpr int64_t kRowsPerTask = 16;
  ParallelFor((m + kRowsPerTask - 1) / kRowsPerTask, m * k >= (int64_t{1} << 18), [&](int64_t t) {
    internal::PackRows(tiles, x, k, nullptr, t * kRowsPerTask, std::min(m, (t + 1) * kRowsPerTask),
                       dst);
  });
}

bool SameXLayout(const internal::TileKernels& a, const internal::TileKernels& b) {
  return a.x_layout == b.x_layout && a.x_block == b.x_block && a.pack_row == b.pack_row;
}

// One product's share of the task loop (task = a chunk of x rows × a block of W rows).
struct TilePlan {
  KernelSet kernels;
  PackedX x;
  size_t packed_at = SIZE_MAX;  // byte offset of its packed x in the scratch; SIZE_MAX: x as is
  bool packs = false;           // the first product over this packed x packs it
  bool scratch = false;
  int64_t chunk_rows = 0, num_chunks = 0, block_cols = 0, first_task = 0;
};

// Where each product's x goes: x as is (kNatural), a slot of its own, or the slot of an earlier
// product over the same x, k and layout. Returns the scratch bytes.
size_t PlaceX(const MatmulProduct* products, const KernelSet* kernels, int64_t count, int64_t m,
              TilePlan* plans) {
  size_t bytes = 0;
  for (int64_t p = 0; p < count; ++p) {
    const internal::TileKernels& own = *kernels[p].tiles;
    const MatmulProduct& q = products[p];
    if (own.x_layout == internal::XLayout::kNatural) continue;
    for (int64_t e = 0; e < p && plans[p].packed_at == SIZE_MAX; ++e) {
      if (plans[e].packed_at != SIZE_MAX && products[e].x == q.x && products[e].w.k == q.w.k &&
          SameXLayout(*kernels[e].tiles, own)) {
        plans[p].packed_at = plans[e].packed_at;
      }
    }
    if (plans[p].packed_at != SIZE_MAX) continue;
    plans[p].packed_at = bytes;
    plans[p].packs = true;
    bytes += static_cast<size_t>(m * internal::PackedRowElements(own, q.w.k)) *
             internal::PackedElementBytes(own);
    bytes = (bytes + 63) / 64 * 64;
  }
  return bytes;
}

// Products whose kernels are tiles (kernels[p].tiles set; n, k > 0), as one task loop: x packed
// once per distinct (x, k, layout), then every product's tasks in one ParallelFor. A single
// product gets exactly the split Matmul always had (≥ 4 tasks per thread).
void RunTiles(const MatmulProduct* products, const KernelSet* kernels, int64_t count, int64_t m) {
  thread_local std::vector<TilePlan> storage;  // grows only; the workers use the caller's
  storage.assign(static_cast<size_t>(count), TilePlan{});
  TilePlan* plans = storage.data();
  const size_t packed_bytes = PlaceX(products, kernels, count, m, plans);
  char* packed = static_cast<char*>(internal::ThreadScratch(ScratchSlot::kPackedX, packed_bytes));
  const int64_t min_tasks = (4 * int64_t{MaxThreads()} + count - 1) / count;
  int64_t tasks = 0, weight_bytes = 0, macs = 0;
  for (int64_t p = 0; p < count; ++p) {
    const MatmulProduct& q = products[p];
    const internal::TileKernels& own = *kernels[p].tiles;
    TilePlan& plan = plans[p];
    plan.kernels = kernels[p];
    plan.x = {q.x, q.w.k};
    if (plan.packed_at != SIZE_MAX) {
      plan.x = {packed + plan.packed_at, internal::PackedRowElements(own, q.w.k)};
      if (plan.packs) PackX(own, q.x, m, q.w.k, packed + plan.packed_at);
    }
    plan.chunk_rows = internal::ChunkRows(own, plan.x.ldx);
    plan.scratch = internal::DecodeToScratch(kernels[p], std::min(m, plan.chunk_rows));
    plan.num_chunks = (m + plan.chunk_rows - 1) / plan.chunk_rows;
    const int64_t row_bytes = std::max<int64_t>(internal::WeightRowBytes(q.w), 1);
    plan.block_cols =
        internal::BlockColumns(q.w.n, row_bytes, plan.num_chunks, min_tasks, own.nr_max);
    plan.first_task = tasks;
    tasks += plan.num_chunks * ((q.w.n + plan.block_cols - 1) / plan.block_cols);
    weight_bytes += q.w.n * row_bytes;
    macs += m * q.w.n * q.w.k;
  }
  ParallelFor(tasks, internal::WorthParallel(weight_bytes, macs), [&](int64_t task) {
    const int64_t p =
        internal::OwnerOf(task, count, [&](int64_t i) { return plans[i].first_task; });
    const TilePlan& plan = plans[p];
    const MatmulWeights& w = products[p].w;
    const int64_t local = task - plan.first_task;
    const int64_t c = local % plan.num_chunks, b = local / plan.num_chunks;
    const int64_t i0 = c * plan.chunk_rows, j0 = b * plan.block_cols;
    internal::RunBlock(plan.kernels, plan.scratch, w, nullptr, plan.x, i0,
                       std::min(m, i0 + plan.chunk_rows), j0, std::min(w.n, j0 + plan.block_cols),
                       products[p].y + i0 * w.n + j0, w.n);
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
    case WeightFormat::kInt8:
      MatmulInt8Reference(x, m, w.k, static_cast<const int8_t*>(w.data),
                          reinterpret_cast<const uint16_t*>(w.scales), w.n, y);
      return;
  }
}

// The tiles `algo` runs a product of m rows on: kAuto's choice (the bf16 tiles for
// MatmulPrecision::kBf16 from kBf16MinRows rows on CPUs without AMX, the int8-activation tiles
// for kInt8), kStreaming's exact tiles, kBf16DotLossy's, kInt8Vnni's. No tiles (null) where the
// product runs elsewhere: AMX (kAmxBf16, and kAuto's bf16 products on AMX CPUs) or the reference
// (scalar ISA). Matmul and MatmulProducts both ask here, so a product gives the same bits through
// either.
KernelSet TilesFor(MatmulAlgo algo, Isa isa, WeightFormat format, int64_t m) {
  switch (algo) {
    case MatmulAlgo::kAuto:
      if (internal::UseAmxProducts(isa, format, m)) return {};
      return internal::KernelsFor(isa, format, m);
    case MatmulAlgo::kAmxBf16:
      return {};
    case MatmulAlgo::kInt8Vnni:
      return internal::Int8ProductKernels(format);
    case MatmulAlgo::kStreaming:
    case MatmulAlgo::kOneDnn:
    case MatmulAlgo::kOneDnnBf16:
    case MatmulAlgo::kBf16DotLossy:
      break;
  }
  return internal::SelectKernels(isa, format, algo == MatmulAlgo::kBf16DotLossy);
}

std::atomic<MatmulPrecision> g_precision{MatmulPrecision::kF32};

}  // namespace

const char* WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return "f32";
    case WeightFormat::kBf16:
      return "bf16";
    case WeightFormat::kMxfp4:
      return "mxfp4";
    case WeightFormat::kInt8:
      return "int8";
  }
  return "?";
}

void SetMatmulPrecision(MatmulPrecision precision) {
  g_precision.store(precision, std::memory_order_relaxed);
}

MatmulPrecision GetMatmulPrecision() { return g_precision.load(std::memory_order_relaxed); }

bool Bf16MatmulSupported() { return ActiveIsa() == Isa::kAvx512Bf16; }

bool Bf16MatmulUsesAmx() { return internal::AmxBf16Usable(); }

bool Int8MatmulSupported() { return internal::Int8ProductsSupported(ActiveIsa()); }

const char* MatmulPrecisionInEffect() {
  const MatmulPrecision precision = GetMatmulPrecision();
  const bool int8 = precision == MatmulPrecision::kInt8 && Int8MatmulSupported();
  if (precision == MatmulPrecision::kF32 || !Bf16MatmulSupported()) return int8 ? "int8" : "f32";
  if (int8) return Bf16MatmulUsesAmx() ? "int8+bf16-amx" : "int8+bf16";
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
    case MatmulAlgo::kInt8Vnni:
      return internal::HasInt8Products(format) && Int8MatmulSupported();
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
  const KernelSet kernels = TilesFor(algo, isa, w.format, m);
  if (kernels.tiles != nullptr) {
    const MatmulProduct product{w, x, y};
    RunTiles(&product, &kernels, 1, m);
  } else if (algo == MatmulAlgo::kAmxBf16 ||
             (algo == MatmulAlgo::kAuto && internal::UseAmxProducts(isa, w.format, m))) {
    internal::MatmulAmxBf16(w, x, m, y);
  } else {
    MatmulReferenceFallback(w, x, m, y);
  }
}

void Matmul(const MatmulWeights& w, const float* x, int64_t m, float* y) {
  MatmulWithAlgo(MatmulAlgo::kAuto, w, x, m, y);
}

void MatmulProducts(const MatmulProduct* products, int64_t count, int64_t m) {
  CHECK_GE(m, 0);
  CHECK_GE(count, 0);
  if (m == 0) return;
  const Isa isa = ActiveIsa();
  // Products on the tiles go into one loop; the rest (empty, k = 0, AMX, scalar ISA) run as
  // Matmul runs them (TilesFor decides for both).
  thread_local std::vector<MatmulProduct> on_tiles;
  thread_local std::vector<KernelSet> tile_kernels;
  on_tiles.clear();
  tile_kernels.clear();
  for (int64_t p = 0; p < count; ++p) {
    const MatmulProduct& q = products[p];
    internal::CheckWeights(q.w);
    const KernelSet kernels = TilesFor(MatmulAlgo::kAuto, isa, q.w.format, m);
    if (q.w.n > 0 && q.w.k > 0 && kernels.tiles != nullptr) {
      on_tiles.push_back(q);
      tile_kernels.push_back(kernels);
    } else {
      Matmul(q.w, q.x, m, q.y);
    }
  }
  if (!on_tiles.empty()) {
    RunTiles(on_tiles.data(), tile_kernels.data(), static_cast<int64_t>(on_tiles.size()), m);
  }
}

}  // namespace strata::kernels::cpu
