// RunBlock and the helpers shared by every product (internal/matmul_driver.h).
#include "kernels/cpu/internal/matmul_driver.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"
#include "core/int8_quantize.h"
#include "core/tensor.h"

namespace strata::kernels::cpu::internal {
namespace {

constexpr int64_t kTaskWeightBytes = int64_t{128} << 10;  // W bytes per task (≈ 3 µs of DRAM)
constexpr int64_t kChunkXBytes = int64_t{512} << 10;      // x bytes per chunk (half of L2)
constexpr int64_t kMaxChunkRows = 64;
// Below both, one thread beats two: waking a sleeping OpenMP team costs ~10–20 µs (the bench
// preset's 256 × 1024 bf16 experts, 512 KB: 8 µs on one thread, 22 µs on two), and on a shared
// host a call also waits whenever the other thread is preempted in the middle of a task
// (measured with the pool on a 2-vCPU VM at load 11: 512 KB m = 1 took 219 µs mean on two
// threads against 32 µs on one; 8 × 1024 × 256 took 303 against 77).
constexpr int64_t kParallelMinWeightBytes = int64_t{768} << 10;
constexpr int64_t kParallelMinMacs = int64_t{1} << 23;
// AVX2 bf16: x rows from which a slice is widened once and run on the 3 × 4 f32 tiles. Below, the
// in-register 2 × 4 tile measured faster (Zen 2, m = 4: 49–73 % against 35–47 % of the ceiling);
// at 16 both measured the same, at 64 and 512 the widened slice is 10–25 % faster.
constexpr int64_t kBf16WidenMinRows = 16;

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Rows j .. j + count − 1 of w at element k0 into t.w[first ...] (and MXFP4 scales).
void RowPointers(const MatmulWeights& w, int64_t j, int count, int64_t k0, const void** rows,
                 const uint8_t** scales) {
  for (int r = 0; r < count; ++r) {
    const int64_t row = j + r;
    switch (w.format) {
      case WeightFormat::kF32:
        rows[r] = static_cast<const float*>(w.data) + row * w.k + k0;
        break;
      case WeightFormat::kBf16:
        rows[r] = static_cast<const uint16_t*>(w.data) + row * w.k + k0;
        break;
      case WeightFormat::kMxfp4:
        rows[r] = static_cast<const uint8_t*>(w.data) + row * (w.k / 2) + k0 / 2;
        scales[r] = w.scales + row * (w.k / kMxfp4BlockSize) + k0 / kMxfp4BlockSize;
        break;
      case WeightFormat::kInt8:
        rows[r] = static_cast<const int8_t*>(w.data) + row * w.k + k0;
        scales[r] = w.scales + 2 * (row * (w.k / kInt8GroupSize) + k0 / kInt8GroupSize);
        break;
    }
  }
}

// The tile's rows for the column group [j, j + g) at k0: g rows of a (plain), or g rows of a then
// g rows of b (paired). Returns the tile's column count.
int GroupRows(const MatmulWeights& a, const MatmulWeights* b, int64_t j, int g, int64_t k0,
              const void** rows, const uint8_t** scales) {
  RowPointers(a, j, g, k0, rows, scales);
  if (b == nullptr) return g;
  RowPointers(*b, j, g, k0, rows + g, scales + g);
  return 2 * g;
}

}  // namespace

bool UseBf16Products(Isa isa, WeightFormat format, int64_t m) {
  return m >= kBf16MinRows && format != WeightFormat::kF32 && isa == Isa::kAvx512Bf16 &&
         GetMatmulPrecision() != MatmulPrecision::kF32;
}

bool Int8ProductsSupported(Isa isa) {
  return (isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16) && GetCpuFeatures().avx512vnni;
}

bool UseInt8Products(Isa isa, WeightFormat format, int64_t m) {
  return HasInt8Products(format) && GetMatmulPrecision() == MatmulPrecision::kInt8 &&
         Int8ProductsSupported(isa) && !UseBf16Products(isa, format, m);
}

KernelSet Int8ProductKernels(WeightFormat format) {
  CHECK(HasInt8Products(format));
  return {format == WeightFormat::kMxfp4 ? &Mxfp4VnniTiles() : &Int8VnniTiles()};
}

KernelSet KernelsFor(Isa isa, WeightFormat format, int64_t m) {
  if (UseInt8Products(isa, format, m)) return Int8ProductKernels(format);
  return SelectKernels(isa, format, UseBf16Tiles(isa, format, m));
}

bool UseAmxProducts(Isa isa, WeightFormat format, int64_t m) {
  return UseBf16Products(isa, format, m) && AmxBf16Usable();
}

bool UseBf16Tiles(Isa isa, WeightFormat format, int64_t m) {
  return UseBf16Products(isa, format, m) && !AmxBf16Usable();
}

KernelSet SelectKernels(Isa isa, WeightFormat format, bool lossy_bf16) {
  const bool avx512 = isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16;
  if (isa == Isa::kScalar) return {};
  if (lossy_bf16) {
    CHECK(isa == Isa::kAvx512Bf16 && format != WeightFormat::kF32);
    const TileKernels* dot = &Bf16DotLossyTilesAvx512Bf16();
    if (format == WeightFormat::kBf16) return {dot};
    // MXFP4 and int8 rows decoded to bf16 first.
    if (format == WeightFormat::kInt8) return {dot, dot, &DecodeInt8TileBf16Avx512, true};
    return {dot, dot, &DecodeMxfp4TileBf16Avx512, true};
  }
  switch (format) {
    case WeightFormat::kF32:
      return {avx512 ? &F32TilesAvx512() : &F32TilesAvx2()};
    case WeightFormat::kBf16:
      if (avx512) return {&Bf16TilesAvx512()};
      return {&Bf16TilesAvx2(), &F32TilesAvx2(), &DecodeBf16TileAvx2, false, kBf16WidenMinRows};
    case WeightFormat::kMxfp4: {
      const TileKernels& own = avx512 ? Mxfp4TilesAvx512() : Mxfp4TilesAvx2();
      return {&own, avx512 ? &F32TilesAvx512() : &F32TilesAvx2(),
              avx512 ? &DecodeMxfp4TileAvx512 : &DecodeMxfp4TileAvx2, false, own.mr_max + 1};
    }
    case WeightFormat::kInt8: {
      const TileKernels& own = avx512 ? Int8TilesAvx512() : Int8TilesAvx2();
      return {&own, avx512 ? &F32TilesAvx512() : &F32TilesAvx2(),
              avx512 ? &DecodeInt8TileAvx512 : &DecodeInt8TileAvx2, false, own.mr_max + 1};
    }
  }
  return {};
}

void CheckWeights(const MatmulWeights& w) {
  CHECK_GE(w.n, 0);
  CHECK_GE(w.k, 0);
  CHECK(w.data != nullptr || w.n * w.k == 0);
  if (w.format == WeightFormat::kMxfp4) {
    CHECK_EQ(w.k % kMxfp4BlockSize, 0) << "MXFP4 rows must hold whole 32-element blocks";
    CHECK(w.scales != nullptr || w.n * w.k == 0);
  }
  if (w.format == WeightFormat::kInt8) {
    CHECK_EQ(w.k % kInt8GroupSize, 0) << "int8 rows must hold whole 32-element groups";
    CHECK(w.scales != nullptr || w.n * w.k == 0);
    CHECK_EQ(reinterpret_cast<uintptr_t>(w.scales) % 2, 0u) << "int8 scales are bf16";
  }
}

int64_t WeightRowBytes(const MatmulWeights& w) {
  switch (w.format) {
    case WeightFormat::kF32:
      return 4 * w.k;
    case WeightFormat::kBf16:
      return 2 * w.k;
    case WeightFormat::kMxfp4:
      return w.k / 2 + w.k / kMxfp4BlockSize;
    case WeightFormat::kInt8:
      return w.k + 2 * (w.k / kInt8GroupSize);
  }
  return 0;
}

int64_t PackedRowElements(const TileKernels& tiles, int64_t k) {
  return RoundUp(std::max<int64_t>(k, 1), tiles.x_block);
}

size_t PackedElementBytes(const TileKernels& tiles) {
  switch (tiles.x_layout) {
    case XLayout::kBf16:
    case XLayout::kQ8Mxfp4:
      return 2;
    case XLayout::kQ8Int8:
      return 3;
    case XLayout::kNatural:
    case XLayout::kEvenOdd:
      return 4;
  }
  return 4;
}

void PackRows(const TileKernels& tiles, const float* x, int64_t k, const int64_t* rows, int64_t i0,
              int64_t i1, void* dst) {
  const int64_t ldx = PackedRowElements(tiles, k);
  const size_t elem = PackedElementBytes(tiles);
  for (int64_t i = i0; i < i1; ++i) {
    const float* src = x + (rows != nullptr ? rows[i] : i) * k;
    char* out = static_cast<char*>(dst) + static_cast<size_t>(i * ldx) * elem;
    if (tiles.x_layout == XLayout::kNatural) {
      std::memcpy(out, src, static_cast<size_t>(k) * sizeof(float));
      std::fill(reinterpret_cast<float*>(out) + k, reinterpret_cast<float*>(out) + ldx, 0.0f);
    } else {
      tiles.pack_row(src, k, out);
    }
  }
}

void* ThreadScratch(ScratchSlot slot, size_t num_bytes) {
  thread_local AlignedBuffer buffers[static_cast<int>(ScratchSlot::kCount)];
  AlignedBuffer& buffer = buffers[static_cast<int>(slot)];
  if (buffer.size() < num_bytes) buffer = AlignedBuffer(num_bytes + num_bytes / 4);
  return buffer.data();
}

int64_t ChunkRows(const TileKernels& tiles, int64_t ldx) {
  const int64_t x_row_bytes = std::max<int64_t>(ldx * 4, 1);
  return std::clamp<int64_t>(kChunkXBytes / x_row_bytes / tiles.mr_max * tiles.mr_max, tiles.mr_max,
                             kMaxChunkRows);
}

bool DecodeToScratch(const KernelSet& kernels, int64_t chunk_rows) {
  return kernels.decode != nullptr &&
         (kernels.always_decode || chunk_rows >= kernels.decode_min_rows);
}

void RunBlock(const KernelSet& kernels, bool decode_to_scratch, const MatmulWeights& a,
              const MatmulWeights* b, PackedX x, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
              float* y, int64_t ldy) {
  const TileKernels& own = *kernels.tiles;
  const TileKernels& tiles = decode_to_scratch ? *kernels.f32_tiles : own;
  const int mr_max = tiles.mr_max;
  const int g_max = b == nullptr ? own.nr_max : own.nr_max / 2;  // output columns per tile
  alignas(64) float scratch[kMaxTileCols * kKBlock];
  const size_t x_elem = PackedElementBytes(own);
  const int64_t k = a.k;
  for (int64_t j = j0; j < j1; j += g_max) {
    const int g = static_cast<int>(std::min<int64_t>(g_max, j1 - j));
    const int64_t y_col = b == nullptr ? j - j0 : 2 * (j - j0);
    for (int64_t k0 = 0; k0 < k; k0 += kKBlock) {
      TileArgs t{};
      t.kc = std::min(kKBlock, k - k0);
      t.ldx = x.ldx;
      t.ldy = ldy;
      t.accumulate = k0 > 0;
      const int nr = GroupRows(a, b, j, g, k0, t.w, t.scales);
      const uint8_t* next_scales[kMaxTileCols];  // not needed for a prefetch
      if (decode_to_scratch) {
        const uint8_t* packed[kMaxTileCols];
        for (int r = 0; r < nr; ++r) packed[r] = static_cast<const uint8_t*>(t.w[r]);
        kernels.decode(packed, t.scales, nr, t.kc, scratch);
        t.kc = RoundUp(t.kc, own.x_block);  // the decoded rows' zero padding pairs with x's
        for (int r = 0; r < nr; ++r) t.w[r] = scratch + r * t.kc;
      } else if (k0 + kKBlock < k) {  // the slice read next: this group's next k block,
        GroupRows(a, b, j, g, k0 + kKBlock, t.w_next, next_scales);
      } else if (j + g_max < j1) {  // else the next group's first block
        const int next_g = static_cast<int>(std::min<int64_t>(g_max, j1 - j - g_max));
        const int next_nr = GroupRows(a, b, j + g_max, next_g, 0, t.w_next, next_scales);
        for (int r = next_nr; r < nr; ++r) t.w_next[r] = t.w_next[0];  // a shorter last group
      }
      for (int64_t i = i0; i < i1; i += mr_max) {
        const int mr = static_cast<int>(std::min<int64_t>(mr_max, i1 - i));
        t.x = static_cast<const char*>(x.data) + (i * x.ldx + k0) * x_elem;
        t.y = y + (i - i0) * ldy + y_col;
        tiles.tiles[mr - 1][nr - 1](t);
        for (const void*& next : t.w_next) next = nullptr;  // only the first x group prefetches
      }
    }
  }
}

int64_t BlockColumns(int64_t n, int64_t bytes_per_column, int64_t other_tasks, int64_t min_tasks,
                     int64_t multiple) {
  int64_t cols = RoundUp(
      std::max<int64_t>(kTaskWeightBytes / std::max<int64_t>(bytes_per_column, 1), 1), multiple);
  if (other_tasks * ((n + cols - 1) / cols) < min_tasks) {
    cols = std::max<int64_t>(multiple,
                             RoundUp((n * other_tasks + min_tasks - 1) / min_tasks, multiple));
  }
  return cols;
}

bool WorthParallel(int64_t weight_bytes, int64_t macs) {
  return weight_bytes >= kParallelMinWeightBytes || macs >= kParallelMinMacs;
}

}  // namespace strata::kernels::cpu::internal
