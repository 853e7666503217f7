// The register-tile kernels behind kernels/cpu/matmul.h, one set per (weight format, ISA).
//
// A tile computes mr × nr outputs over one k block:
//   y[i, j] (+)= Σ_{p < kc} x[i, p] · W[j, p]      i < mr ≤ mr_max, j < nr ≤ nr_max
// with one vector accumulator per output, reduced at the end of the block by the fixed tree of
// ReduceTree (internal/reduce.h). Each accumulator sees its products in the same order whatever
// mr and nr are, which is what makes results independent of m and of the thread count.
//
// Activation layouts (TileKernels::x_layout), rows padded with zeros to a multiple of
// x_block elements:
//   kNatural   x as given (f32 and int8 weights).
//   kEvenOdd   per block of x_block = 2V elements (V = f32 lanes: 16 AVX-512, 8 AVX2):
//              [x0 x2 x4 … x(2V−2) | x1 x3 … x(2V−1)] — the order in which a bf16 pair load
//              widens (even = w << 16, odd = w & 0xFFFF0000) and MXFP4 bytes decode (low nibble
//              = even element, high nibble = odd).
//   kBf16      x rounded to bf16, natural order (the lossy vdpbf16ps variant).
//   kQ8Mxfp4,  x rounded to int8 per 32-element block with its int32 lane corrections and f32
//   kQ8Int8    scales (MatmulPrecision::kInt8's VNNI tiles; matmul_vnni.cc has the layouts):
//              2 and 3 bytes per element, superblocks of 128 and 64 elements.
//
//   x_perm row i (kEvenOdd, V = 4 shown):
//   k:      0  1  2  3  4  5  6  7 | 8  9 ...
//   stored: 0  2  4  6  1  3  5  7 | 8 10 ...
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_glu.h"

namespace strata::kernels::cpu::internal {

// Every k block but the last is kKBlock elements (a multiple of every x_block and of 32).
inline constexpr int64_t kKBlock = 1024;
inline constexpr int kMaxTileRows = 4;  // mr_max upper bound
inline constexpr int kMaxTileCols = 4;  // nr_max upper bound

enum class XLayout { kNatural, kEvenOdd, kBf16, kQ8Mxfp4, kQ8Int8 };

struct TileArgs {
  const void* x;  // row 0 of the x operand at element k0 (f32, or bf16 for kBf16)
  int64_t ldx;    // x row stride in elements
  // W row j of the tile at element k0 (f32 / bf16 elements; MXFP4 bytes), j < nr. Rows are
  // independent pointers, so one tile can take its rows from two matrices (the fused GLU takes
  // gate rows then up rows) and read them in the same pass over x.
  const void* w[kMaxTileCols];
  // MXFP4: E8M0 scale of row j's block k0/32; int8: that block's bf16 scale (as bytes).
  const uint8_t* scales[kMaxTileCols];
  int64_t kc;  // elements in this block (≤ kKBlock; MXFP4 and int8: a multiple of 32)
  float* y;    // y[0, 0] of the tile
  int64_t ldy;
  bool accumulate;  // y += tile (later k blocks) or y = tile (first block)
  // The weight slice the task reads next, row by row (same layout as w), or all null: the tile
  // prefetches it while it computes, so DRAM streams one slice ahead.
  const void* w_next[kMaxTileCols];
};

using TileFn = void (*)(const TileArgs& args);

// Writes one activation row of k elements in the tiles' layout, zero-padded to a whole x_block.
using PackRowFn = void (*)(const float* src, int64_t k, void* dst);

// Decodes nr weight rows (k block of kc elements; row r's data at packed[r], MXFP4 scales at
// scales[r]) to f32 in the kEvenOdd order of this ISA: dst[r * kc_pad + q] pairs with x_perm[q],
// kc_pad = kc rounded up to the layout's x_block, the padding zero. Exactly the values the
// in-register kernel uses, so the f32 tiles over them give its results bit for bit.
using DecodeFn = void (*)(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                          int64_t kc, float* dst);

struct TileKernels {
  int mr_max = 0;
  int nr_max = 0;
  XLayout x_layout = XLayout::kNatural;
  int x_block = 1;                                // padding/permutation block of x
  PackRowFn pack_row = nullptr;                   // kEvenOdd / kBf16 (kNatural: x as given)
  TileFn tiles[kMaxTileRows][kMaxTileCols] = {};  // [mr − 1][nr − 1]
};

// Per ISA (kAvx512 serves kAvx512Bf16 as well; kScalar has none: the caller falls back to the
// reference). The f32 kernels for kEvenOdd x run on MXFP4 tiles decoded by DecodeMxfp4Tile*.
const TileKernels& F32TilesAvx512();
const TileKernels& F32TilesAvx2();
const TileKernels& Bf16TilesAvx512();
const TileKernels& Bf16TilesAvx2();
const TileKernels& Mxfp4TilesAvx512();
const TileKernels& Mxfp4TilesAvx2();
const TileKernels& Int8TilesAvx512();
const TileKernels& Int8TilesAvx2();
const TileKernels& Bf16DotLossyTilesAvx512Bf16();
// MatmulPrecision::kInt8's tiles for MXFP4 and int8 weights (AVX512_VNNI; matmul_vnni.cc).
const TileKernels& Mxfp4VnniTiles();
const TileKernels& Int8VnniTiles();
void DecodeMxfp4TileAvx512(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                           int64_t kc, float* dst);
void DecodeMxfp4TileAvx2(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                         int64_t kc, float* dst);
// bf16 rows widened to f32 (kEvenOdd, 16-element blocks): the AVX2 prefill path, where the 2-row
// bf16 tile is bound by FMA latency and the 3-row f32 tile over the widened slice is not.
void DecodeBf16TileAvx2(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                        int64_t kc, float* dst);
// MXFP4 rows as bf16 in natural order, for the bf16 products (MatmulPrecision::kBf16): exact, an
// E2M1 value times 2^e having at most 2 significant bits. DecodeMxfp4RowBf16 writes block b (32
// values) of one row at dst + b·block_stride; DecodeMxfp4TileBf16Avx512 is a DecodeFn whose row r
// is the bf16 row at (uint16_t*)(dst + r·kc) (AVX-512 both).
void DecodeMxfp4RowBf16(const uint8_t* packed, const uint8_t* scales, int64_t blocks,
                        int64_t block_stride, uint16_t* dst);
void DecodeMxfp4TileBf16Avx512(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                               int64_t kc, float* dst);

// Int8 rows (core/int8_quantize.h) as f32 in natural order (scales[r]: row r's bf16 scales, as
// bytes), for the f32 tiles: exactly the in-register kernel's values.
void DecodeInt8TileAvx512(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                          int64_t kc, float* dst);
void DecodeInt8TileAvx2(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                        int64_t kc, float* dst);
// Int8 rows as bf16 in natural order for the bf16 products: code · scale rounded to nearest even
// (8 of its up to 15 significant bits: relative error ≤ 2⁻⁹, as x's own rounding there) by
// vcvtne2ps2bf16, so AVX512_BF16 CPUs only (where those products run). Layouts as
// DecodeMxfp4RowBf16 / DecodeMxfp4TileBf16Avx512 with 32-element groups.
void DecodeInt8RowBf16(const int8_t* codes, const uint16_t* scales, int64_t groups,
                       int64_t group_stride, uint16_t* dst);
void DecodeInt8TileBf16Avx512(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                              int64_t kc, float* dst);

// Row packers (kernels/cpu/matmul_pack_x.cc): kEvenOdd with 32- and 16-element blocks, and kBf16
// (round to nearest even, 32-element blocks).
void PackEvenOddRowAvx512(const float* src, int64_t k, void* out);
void PackEvenOddRowAvx2(const float* src, int64_t k, void* out);
void PackBf16Row(const float* src, int64_t k, void* out);

// E8M0 scale byte → f32 (2^(e−127); 0 → 2^−127, 0xFF → NaN), as a 256-entry table.
const float* E8M0Table();

// The oneDNN path (kernels/cpu/matmul_onednn.cc).
void MatmulOneDnn(const MatmulWeights& w, const float* x, int64_t m, float* y);
// x rounded to bf16 × bf16 W → f32 through oneDNN (AMX tiles where the CPU has them; for
// comparison); bf16 weights only, AVX512_BF16 CPUs only.
void MatmulOneDnnBf16(const MatmulWeights& w, const float* x, int64_t m, float* y);

// The AMX path (kernels/cpu/matmul_amx.cc): x rounded to bf16 × bf16 W → f32 on AMX tiles, W read
// in place (no reorder, any n and k). AmxBf16Usable: the CPU has AMX-BF16, the OS granted tile
// data (asked once) and the ISA cap is AVX512_BF16.
bool AmxBf16Usable();
void MatmulAmxBf16(const MatmulWeights& w, const float* x, int64_t m, float* y);
// Fused gate/up products of independent groups (an MoE layer's experts; kernels/cpu/matmul_glu.h)
// on AMX: every group's x rows (gathered) packed in one parallel loop, then one parallel loop over
// all groups' W row blocks, each task computing the gate and up blocks of the same rows and
// writing h = act(gate) ⊙ cap(up) itself (GluActAvx512; elementwise, so equal to the activation
// over whole rows). Products as MatmulAmxBf16's.
void MatmulAmxBf16Glu(const GluGroup* groups, int64_t count, const GluParams& act);
// On this thread (a task of MatmulScatterAddGrouped): columns [j0, j1) of
//   y[rows[i], :] = fma(scale[i], (x · Wᵀ)[i, :], y[rows[i], :])   for i = 0 .. m − 1 in order
// (rows / scale null: row i / 1), x packed by PackXForAmxInto at xp, row stride ldy; j0 a
// multiple of 32. The products are MatmulAmxBf16's, bit for bit.
// `prefetched`: W rows [j0, j1) were prefetched (the previous call's `next`); `next`: what the
// task reads after this call (the next group's W rows [j0, j1) and packed x), prefetched to L2
// during this call's products.
struct AmxPrefetchNext {
  const MatmulWeights* w = nullptr;
  const uint32_t* xp = nullptr;
  int64_t xp_words = 0;
};
void AmxScatterAddColumns(const MatmulWeights& w, const uint32_t* xp, int64_t m,
                          const int64_t* rows, const float* scale, int64_t j0, int64_t j1,
                          int64_t ldy, float* y, bool prefetched, const AmxPrefetchNext& next);

}  // namespace strata::kernels::cpu::internal
