// The pieces every product in kernels/cpu shares (Matmul, MatmulGlu, the grouped expert
// products): kernel choice per (format, ISA), x packing, the task split, and RunBlock, which runs
// the register tiles over one block of outputs.
//
// A block = x rows [i0, i1) × W rows [j0, j1), all of k:
//
//   for each group of nr W rows:            (paired: nr/2 rows of W_a, then the same of W_b)
//     for each 1024-wide k block:
//       (MXFP4, many x rows: decode nr × 1024 to an L1 f32 scratch)
//       for each group of mr x rows: tile(mr, nr, k block) → y
//
// The nr × 1024 weight slice stays in L1 while every x group passes over it, and each tile
// prefetches the slice read next (internal/prefetch.h), so a block reads its weights from DRAM
// exactly once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/matmul.h"

namespace strata::kernels::cpu::internal {

struct KernelSet {
  const TileKernels* tiles = nullptr;      // the format's own tiles; null: use the reference
  const TileKernels* f32_tiles = nullptr;  // scratch path (MXFP4; bf16 on AVX2)
  DecodeFn decode = nullptr;               // scratch path
  bool always_decode = false;              // `tiles` cannot read MXFP4 rows (bf16 products)
  // Else the scratch path runs from this many x rows per chunk: where one decoded slice serves
  // more x rows than one own tile (MXFP4), or where widening measured faster (bf16 on AVX2).
  int64_t decode_min_rows = 0;
};

KernelSet SelectKernels(Isa isa, WeightFormat format, bool lossy_bf16);
// Whether a product of m rows multiplies in bf16 under GetMatmulPrecision() (bf16, MXFP4 or int8
// weights — MXFP4 decoded to bf16 exactly, int8 rounded —, AVX512_BF16, m ≥ kBf16MinRows,
// precision kBf16).
// Matmul then runs them on AMX tiles (matmul_amx.cc) where the CPU has AMX, else on the vdpbf16ps
// tiles.
bool UseBf16Products(Isa isa, WeightFormat format, int64_t m);
// Whether a product of m rows runs on AMX tiles: UseBf16Products and an AMX CPU.
bool UseAmxProducts(Isa isa, WeightFormat format, int64_t m);
// The `lossy_bf16` of SelectKernels: bf16 products on CPUs without AMX. With AMX the bf16
// products go to the AMX tiles (Matmul, and the grouped products group by group), never to the
// vdpbf16ps tiles: vdpbf16ps runs at the FMA rate there, measured slower than the f32 tiles
// (28.9 vs 24.4 ms, 512×4096×1024).
bool UseBf16Tiles(Isa isa, WeightFormat format, int64_t m);
// MatmulPrecision::kInt8's products (x rounded to int8, VNNI tiles: matmul_vnni.cc) run here:
// an AVX-512 ISA and AVX512_VNNI.
bool Int8ProductsSupported(Isa isa);
// The weight formats the int8-activation tiles read: MXFP4 and int8.
inline bool HasInt8Products(WeightFormat format) {
  return format == WeightFormat::kMxfp4 || format == WeightFormat::kInt8;
}
// Whether a product of m rows runs on them: MXFP4 or int8 weights, precision kInt8, supported,
// and not one of the bf16 products (kInt8 keeps kBf16's products from kBf16MinRows rows where
// the CPU has them: AMX and vdpbf16ps outrun the int8 tiles there).
bool UseInt8Products(Isa isa, WeightFormat format, int64_t m);
// The int8-activation tiles for MXFP4 or int8 weights.
KernelSet Int8ProductKernels(WeightFormat format);
// The tiles kAuto runs a product of m rows on (when it runs on tiles, i.e. not on AMX): the
// int8-activation tiles, the bf16 tiles or the format's exact ones.
KernelSet KernelsFor(Isa isa, WeightFormat format, int64_t m);

// Checks a weight view's invariants (CHECK): n, k ≥ 0, data present, MXFP4 k % 32 == 0.
void CheckWeights(const MatmulWeights& w);

// Bytes of one W row in its format (MXFP4: packed codes + scales).
int64_t WeightRowBytes(const MatmulWeights& w);

// x rows in the layout the tiles expect (matmul_tiles.h), each padded with zeros to ldx elements.
struct PackedX {
  const void* data = nullptr;
  int64_t ldx = 0;  // elements per row
};
int64_t PackedRowElements(const TileKernels& tiles, int64_t k);
size_t PackedElementBytes(const TileKernels& tiles);
// Packs rows i ∈ [i0, i1) of the gathered x: source row = x + (rows ? rows[i] : i) · k, into
// dst + i · ldx (elements). kNatural (f32 weights) copies and zero-pads.
void PackRows(const TileKernels& tiles, const float* x, int64_t k, const int64_t* rows, int64_t i0,
              int64_t i1, void* dst);

// A per-thread buffer that only grows (no allocation once warm). Slots are independent buffers.
enum class ScratchSlot { kPackedX, kBlockOut, kCount };
void* ThreadScratch(ScratchSlot slot, size_t num_bytes);

// x rows per chunk (a chunk of x stays in L2; ≤ 64 rows) for rows of ldx elements.
int64_t ChunkRows(const TileKernels& tiles, int64_t ldx);

// True when the scratch path runs for chunks of `chunk_rows` x rows (KernelSet::decode_min_rows).
bool DecodeToScratch(const KernelSet& kernels, int64_t chunk_rows);

// Runs one block. Plain (b == null): y[(i − i0)·ldy + (j − j0)] = x_i · W_a[j]. Paired (b set,
// same n, k and format as a): tiles take nr/2 rows of W_a and the same rows of W_b, and write the
// group of g ≤ nr_max/2 columns starting at c = j − j0 as
//   y[(i − i0)·ldy + 2c + q] = x_i · W_a[j + q],  y[(i − i0)·ldy + 2c + g + q] = x_i · W_b[j + q]
// (PairedColumn below finds them). Results do not depend on the block bounds.
void RunBlock(const KernelSet& kernels, bool decode_to_scratch, const MatmulWeights& a,
              const MatmulWeights* b, PackedX x, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
              float* y, int64_t ldy);

// Offsets of column c's a and b values inside a paired block row of `width` columns, for tiles
// with nr_max columns.
struct PairedOffsets {
  int64_t a, b;
};
inline PairedOffsets PairedColumn(int64_t c, int64_t width, int nr_max) {
  const int64_t g = nr_max / 2;
  const int64_t start = c - c % g;
  const int64_t size = width - start < g ? width - start : g;
  return {2 * start + c % g, 2 * start + size + c % g};
}

// Columns per task so that a task reads ~128 KB of weights, but at least `min_tasks` tasks in
// total when the matrix allows (load balance on a shared machine); a multiple of `multiple`.
int64_t BlockColumns(int64_t n, int64_t bytes_per_column, int64_t other_tasks, int64_t min_tasks,
                     int64_t multiple);

// Whether a product of this size pays for waking the other threads.
bool WorthParallel(int64_t weight_bytes, int64_t macs);

// Tasks of several products in one loop: the product owning global task `task`, given each
// product's first task first_of(i) (ascending, first_of(0) = 0) over `count` products.
template <typename FirstOf>
int64_t OwnerOf(int64_t task, int64_t count, FirstOf first_of) {
  int64_t lo = 0, hi = count - 1;
  while (lo < hi) {  // the last product with first ≤ task
    const int64_t mid = (lo + hi + 1) / 2;
    if (first_of(mid) <= task) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace strata::kernels::cpu::internal
