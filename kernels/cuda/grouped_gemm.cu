#include "kernels/cuda/grouped_gemm.h"

#include <algorithm>
#include <climits>
#include <string>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/hopper.cuh"
#include "kernels/cuda/internal/launch.cuh"
#include "kernels/cuda/internal/mma.cuh"
#include "kernels/cuda/wgmma.h"

namespace strata::kernels::cuda {
namespace {

using internal::CpAsync16;
using internal::CpAsync4;
using internal::CpAsyncCommit;
using internal::CpAsyncWait;
using internal::FenceProxyAsync;
using internal::FloatToBf16Bits;
using internal::Int8PairToBf16x2;
using internal::LdMatrixX4;
using internal::MmaBf16;
using internal::MmaBf16Group32;
using internal::MulBf16x2;
using internal::SigmoidF;
using internal::SiluF;
using internal::WgmmaBf16;
using internal::WgmmaCommit;
using internal::WgmmaDescriptor;
using internal::WgmmaFence;
using internal::WgmmaFenceOperands;
using internal::WgmmaWait;

// Rows [row_begin, row_end) (at most one tile's worth) of expert `expert`.
struct WorkItem {
  int32_t expert, row_begin, row_end, pad;
};
constexpr int64_t kListHeaderBytes = 16;  // int32 entry count, padded to 16 B
constexpr int kMinTileRows = 16;          // the smallest BM: sizes the workspace
constexpr int kListThreads = 1024;

// How the B (weight) tile arrives: bf16 straight into the stage, or MXFP4 / int8 groups of 32
// dequantised from the stage into one bf16 tile per CTA.
enum class WeightFmt { kBf16, kMxfp4, kInt8 };

// CTA tile BM × BN × BK, WM × WN warps, STAGES-deep cp.async pipeline. WGMMA: the product runs
// on wgmma (each warpgroup one m64 × BN slice, A from registers), the stage's B tile is laid out
// as wgmma's no-swizzle K-major operand (bf16 weights only).
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int MIN_BLOCKS, bool WGMMA = false>
struct Tile {
  static constexpr int kBm = BM, kBn = BN, kBk = BK, kStages = STAGES, kMinBlocks = MIN_BLOCKS;
  static constexpr bool kWgmma = WGMMA;
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kPitch = BK + 8;  // bf16 per shared row: +16 B keeps ldmatrix conflict-free
  static constexpr int kWarpM = BM / WM, kWarpN = BN / WN;
  static constexpr int kMt = kWarpM / 16, kNt = kWarpN / 8;  // m16 / n8 tiles per warp
  static constexpr int kChunks = BK / 8;                     // 16-byte bf16 chunks per row
  static constexpr int kBlocks = BK / 32;                    // scale groups (of 32) per row
  static constexpr int kABytes = BM * kPitch * 2;
  static constexpr int kBBytes = BN * kPitch * 2;
  static constexpr int kPackedBytes = BN * BK / 2;      // MXFP4 codes
  static constexpr int kCodeBytes = BN * BK;            // int8 codes
  static constexpr int kScaleBytes = BN * kBlocks * 4;  // one 32-bit word per scale
  static constexpr int kLutBytes = 256 * 4;
  static constexpr int CodeBytes(WeightFmt f) {
    return f == WeightFmt::kMxfp4 ? kPackedBytes : kCodeBytes;
  }
  static constexpr int StageBytes(WeightFmt f) {
    return kABytes + (f == WeightFmt::kBf16 ? kBBytes : CodeBytes(f) + kScaleBytes);
  }
  // Stages, then (MXFP4) the byte → bf16×2 table. MXFP4 and int8 codes are decoded from the
  // stage straight into the B fragments (ComputeStageDecoded): no bf16 B tile.
  static constexpr int SmemBytes(WeightFmt f) {
    return STAGES * StageBytes(f) + (f == WeightFmt::kMxfp4 ? kLutBytes : 0);
  }
  static_assert(BK % 32 == 0 && kMt >= 1 && kNt % 2 == 0 && kWarpN % 32 == 0, "tile shape");
  static_assert(kABytes % 16 == 0 && kBBytes % 16 == 0 && kPackedBytes % 16 == 0 &&
                    kCodeBytes % 16 == 0 && kScaleBytes % 16 == 0,
                "shared regions must stay 16-byte aligned");
};
using LargeTile = Tile<128, 128, 32, 2, 4, 4, 2>;
using SmallTile = Tile<16, 128, 64, 1, 4, 4, 4>;
// Prefill-sized groups on wgmma: 8 warps of 16 rows (two warpgroups of m64), each over all 128
// columns (m64n128k16), 4 stages, two CTAs an SM.
using WgmmaTile = Tile<128, 128, 32, 8, 1, 4, 2, true>;
static_assert(WgmmaTile::SmemBytes(WeightFmt::kBf16) * 2 <= 227 * 1024, "two wgmma CTAs per SM");
static_assert(WgmmaTile::kBm == LargeTile::kBm, "the work list of a large tile serves both");
static_assert(LargeTile::SmemBytes(WeightFmt::kBf16) * 2 <= 227 * 1024, "two large CTAs per SM");
static_assert(SmallTile::SmemBytes(WeightFmt::kBf16) * 2 <= 227 * 1024, "two small CTAs per SM");
static_assert(LargeTile::SmemBytes(WeightFmt::kInt8) * 2 <= 227 * 1024, "two int8 CTAs per SM");

struct GemmParams {
  const uint16_t* x;
  const int32_t* x_rows;  // null: row r of the product reads row r of x
  int64_t x_row_count;
  const uint16_t* w_bf16;
  const uint8_t* w_packed;  // MXFP4 codes
  const int8_t* w_codes;    // int8 codes
  const void* w_scales;     // E8M0 bytes (MXFP4) or bf16 (int8), [E·n_w, k/32]
  uintptr_t scales_end;     // one past the last scale byte
  const int32_t* count;     // work-list entries
  const WorkItem* items;
  void* y;
  int64_t k;
  int64_t n_w;    // weight rows per expert
  int64_t n_out;  // output columns = y row pitch
  int n_tiles;    // CTA tiles along the output columns
  GluKind glu_kind;
  float beta1, beta2;
};

// bf16 bits of kE2M1Values[code] (exact: every E2M1 value has ≤ 2 significant bits).
__constant__ uint16_t kE2M1Bf16[16] = {0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040,
                                       0x4080, 0x40c0, 0x8000, 0xbf00, 0xbf80, 0xbfc0,
                                       0xc000, 0xc040, 0xc080, 0xc0c0};

// One CTA: tiles per expert (offsets clamped to [0, rows]), a block-wide exclusive scan, then
// each thread writes the entries of its experts. Entries past `capacity` are dropped (only a
// non-ascending offsets table can produce more than ⌈rows/bm⌉ + E).
__global__ void __launch_bounds__(kListThreads)
    BuildWorkListKernel(const int32_t* __restrict__ offsets, int num_experts, int rows, int bm,
                        int capacity, int32_t* __restrict__ count, WorkItem* __restrict__ items) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ int32_t scan[kListThreads];
  const int tid = threadIdx.x;
  const int per = (num_experts + kListThreads - 1) / kListThreads;
  const int e_begin = min(tid * per, num_experts), e_end = min(e_begin + per, num_experts);
  // No table: one expert over every row.
  auto clamped = [&](int e) {
    return offsets == nullptr ? (e == 0 ? 0 : rows) : min(max(offsets[e], 0), rows);
  };
  int32_t local = 0;
  for (int e = e_begin; e < e_end; ++e) {
    local += (max(clamped(e + 1) - clamped(e), 0) + bm - 1) / bm;
  }
  scan[tid] = local;
  internal::BlockInclusiveScan(scan);
  int32_t next = scan[tid] - local;
  for (int e = e_begin; e < e_end; ++e) {
    const int32_t begin = clamped(e), end = max(clamped(e + 1), begin);
    for (int32_t r = begin; r < end; r += bm, ++next) {
      if (next < capacity) items[next] = WorkItem{e, r, min(r + bm, end), 0};
    }
  }
  if (tid == kListThreads - 1) *count = min(scan[tid], capacity);
}

// Weight row (within the expert) held by row r of the CTA's B tile, or −1 past the end. GLU
// tiles interleave by 8: tile rows 16q..16q+7 are gate rows of outputs 8q..8q+7 of the tile,
// rows 16q+8..16q+15 the up rows of the same outputs, so a warp's n8 tiles 2j, 2j+1 pair up.
template <class T, bool kGlu>
__device__ __forceinline__ int WeightRow(int r, int n_tile, const GemmParams& p) {
  if (kGlu) {
    const int col = n_tile * (T::kBn / 2) + (r >> 4) * 8 + (r & 7);
    if (col >= p.n_out) return -1;
    return ((r >> 3) & 1) ? col + static_cast<int>(p.n_out) : col;
  }
  const int row = n_tile * T::kBn + r;
  return row < p.n_w ? row : -1;
}

// bf16 offset of 16-byte chunk j (k values 8j .. 8j + 7) of B-tile row `row` in wgmma's
// no-swizzle K-major layout: core matrices 128 B apart along k, kBk / 8 of them per 8 rows.
template <class T>
__device__ __forceinline__ int WgmmaBOffset(int row, int j) {
  return (row % 8) * 8 + (row / 8) * (T::kBk / 8) * 64 + j * 64;
}

// Issues the cp.async copies of k-tile `kt` into `stage` (zero-fill past rows / n / k). Offsets
// inside the CTA's row tile and the expert's matrix are 32-bit (k < 2^24, n_w·k < 2^31).
template <class T, WeightFmt kFmt, bool kGlu>
__device__ __forceinline__ void LoadStage(unsigned char* stage, const GemmParams& p,
                                          const WorkItem& item, int n_tile, int kt) {
  const int tid = threadIdx.x, k = static_cast<int>(p.k), k0 = kt * T::kBk;
  const int rows_here = item.row_end - item.row_begin;
  uint16_t* a_s = reinterpret_cast<uint16_t*>(stage);
  for (int c = tid; c < T::kBm * T::kChunks; c += T::kThreads) {
    const int row = c / T::kChunks, kc = k0 + (c % T::kChunks) * 8;
    bool valid = row < rows_here && kc < k;
    int64_t src_row = item.row_begin + row;
    if (valid && p.x_rows != nullptr) {  // the gather in the load path
      src_row = p.x_rows[src_row];
      valid = src_row >= 0 && src_row < p.x_row_count;
    }
    CpAsync16(a_s + row * T::kPitch + (c % T::kChunks) * 8, valid ? p.x + (src_row * k + kc) : p.x,
              valid);
  }
  const int64_t expert_row0 = static_cast<int64_t>(item.expert) * p.n_w;
  if constexpr (kFmt == WeightFmt::kBf16) {
    const uint16_t* w_expert = p.w_bf16 + expert_row0 * p.k;
    uint16_t* b_s = reinterpret_cast<uint16_t*>(stage + T::kABytes);
    for (int c = tid; c < T::kBn * T::kChunks; c += T::kThreads) {
      // wgmma's layout: chunk (row, j) is row (row % 8) of core matrix (row / 8, j); rows run
      // fastest over the threads so each 8 of them fill one 128-byte core matrix.
      const int row = T::kWgmma ? c % T::kBn : c / T::kChunks;
      const int j = T::kWgmma ? c / T::kBn : c % T::kChunks;
      const int kc = k0 + j * 8;
      const int wr = WeightRow<T, kGlu>(row, n_tile, p);
      const bool valid = wr >= 0 && kc < k;
      uint16_t* dst = T::kWgmma ? b_s + WgmmaBOffset<T>(row, j) : b_s + row * T::kPitch + j * 8;
      CpAsync16(dst, valid ? w_expert + (wr * k + kc) : p.w_bf16, valid);
    }
  } else {
    constexpr bool kMxfp4 = kFmt == WeightFmt::kMxfp4;
    constexpr int kScaleSize = kMxfp4 ? 1 : 2;     // bytes per scale
    constexpr int kGroupBytes = kMxfp4 ? 16 : 32;  // code bytes per group of 32
    const int kblocks = k / 32;
    const uint8_t* codes_expert =
        kMxfp4 ? p.w_packed + expert_row0 * (p.k / 2)
               : reinterpret_cast<const uint8_t*>(p.w_codes) + expert_row0 * p.k;
    const uintptr_t scale_expert =
        reinterpret_cast<uintptr_t>(p.w_scales) + expert_row0 * kblocks * kScaleSize;
    uint8_t* codes_s = stage + T::kABytes;
    uint32_t* scale_s = reinterpret_cast<uint32_t*>(stage + T::kABytes + T::CodeBytes(kFmt));
    for (int c = tid; c < T::kBn * T::kBlocks; c += T::kThreads) {
      const int row = c / T::kBlocks, j = c % T::kBlocks, kb = kt * T::kBlocks + j;
      const int wr = WeightRow<T, kGlu>(row, n_tile, p);
      const bool valid = wr >= 0 && kb < kblocks;
      const uint8_t* src = valid ? codes_expert + (wr * kblocks + kb) * kGroupBytes : codes_expert;
#pragma unroll
      for (int h = 0; h < kGroupBytes / 16; ++h) {
        CpAsync16(codes_s + (row * T::kBlocks + j) * kGroupBytes + h * 16, src + h * 16, valid);
      }
      // The aligned word holding the scale, cut at the end of the array (no byte past it is
      // read); the dequantisation picks the scale out of the word.
      const uintptr_t word =
          (scale_expert + (valid ? (wr * kblocks + kb) * kScaleSize : 0)) & ~uintptr_t{3};
      const uintptr_t left = p.scales_end - word;  // >= 1 when valid
      const int bytes = !valid ? 0 : left < 4 ? static_cast<int>(left) : 4;
      CpAsync4(scale_s + row * T::kBlocks + j, reinterpret_cast<const void*>(word), bytes);
    }
  }
}

// Two decoded bf16 (low half = even element) of packed byte `b` times 2^(s−127), s ≠ 0xff, as
// DecodeMxfp4 + F32ToBf16 computes them. For 4 ≤ s ≤ 250 the scale and every product are normal
// bf16 numbers, so one exact bf16×2 multiply suffices; otherwise (subnormal scales, overflow to
// ±inf) the f32 product is rounded like the host does.
__device__ __forceinline__ uint32_t DecodePair(uint32_t lut_word, uint32_t s) {
  if (s >= 4u && s <= 250u) return MulBf16x2(lut_word, (s << 7) | (s << 23));
  const float scale = s == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(s << 23);
  const float lo = __uint_as_float(lut_word << 16) * scale;
  const float hi = __uint_as_float(lut_word & 0xffff0000u) * scale;
  return static_cast<uint32_t>(FloatToBf16Bits(lo)) |
         (static_cast<uint32_t>(FloatToBf16Bits(hi)) << 16);
}

// The shift (0, 8, 16, 24) of the scale of weight row `wr`, group `kb`, within the aligned
// 32-bit word LoadStage copied for it; 0 for zero-filled groups (past n or k, word 0).
template <int kScaleSize>
__device__ __forceinline__ uint32_t ScaleShift(const GemmParams& p, const WorkItem& item, int wr,
                                               int kb) {
  const int kblocks = static_cast<int>(p.k / 32);
  if (wr < 0 || kb >= kblocks) return 0;
  const uintptr_t scale_expert = reinterpret_cast<uintptr_t>(p.w_scales) +
                                 static_cast<int64_t>(item.expert) * p.n_w * kblocks * kScaleSize;
  return static_cast<uint32_t>((scale_expert + (wr * kblocks + kb) * kScaleSize) & 3u) * 8u;
}

// acc += A_tile · B_tileᵀ over one BK slice, B as MXFP4 or int8 codes in the stage, decoded in
// registers into the mma B fragments (no bf16 tile, no barrier, no ldmatrix of B).
//
// The k sum may run in any order, so for each scale group (32 k) lane (g = lane / 4, q = lane %
// 4) decodes elements 8q … 8q + 7 of its weight row (one 8- or 4-byte read) into four bf16 pairs
// and reads the same elements of its A rows, then runs the group's two m16n8k16 steps under the
// permutation MmaBf16Group32 (mma.cuh) defines. Per group, not per slice: both tiles feed every
// mma the same operands, so a row's result does not depend on the tile (prompt pieces give the
// whole prompt's result).
template <class T, WeightFmt kFmt, bool kGlu>
__device__ __forceinline__ void ComputeStageDecoded(const unsigned char* stage, const uint32_t* lut,
                                                    const GemmParams& p, const WorkItem& item,
                                                    int n_tile, int kt, int wm0, int wn0,
                                                    float (&acc)[T::kMt][T::kNt][4]) {
  constexpr bool kMxfp4 = kFmt == WeightFmt::kMxfp4;
  constexpr int kGroupBytes = kMxfp4 ? 16 : 32;  // stage code bytes per row and group
  constexpr int kLaneBytes = kGroupBytes / 4;    // a lane's 8 codes
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const uint16_t* a_s = reinterpret_cast<const uint16_t*>(stage);
  const unsigned char* codes_s = stage + T::kABytes;
  const uint32_t* scale_s =
      reinterpret_cast<const uint32_t*>(stage + T::kABytes + T::CodeBytes(kFmt));
#pragma unroll
  for (int j = 0; j < T::kBlocks; ++j) {
    uint32_t b[T::kNt][4];  // every n8 tile's four pairs, then one m16 tile's A at a time
#pragma unroll
    for (int jn = 0; jn < T::kNt; ++jn) {
      const int r = wn0 + jn * 8 + g;  // stage row of the lane's B column
      const int wr = WeightRow<T, kGlu>(r, n_tile, p);
      const uint32_t word = scale_s[r * T::kBlocks + j];
      const unsigned char* src = codes_s + (r * T::kBlocks + j) * kGroupBytes + q * kLaneBytes;
      if constexpr (kMxfp4) {
        const uint32_t codes = *reinterpret_cast<const uint32_t*>(src);
        const uint32_t sc = (word >> ScaleShift<1>(p, item, wr, kt * T::kBlocks + j)) & 0xffu;
#pragma unroll
        for (int i = 0; i < 4; ++i) {  // byte i holds elements 2i (low nibble), 2i + 1
          b[jn][i] = sc == 0xffu ? 0x7fc07fc0u : DecodePair(lut[(codes >> (8 * i)) & 0xffu], sc);
        }
      } else {
        const uint2 w = *reinterpret_cast<const uint2*>(src);
        const uint32_t codes[2] = {w.x, w.y};
        const uint32_t bits = (word >> ScaleShift<2>(p, item, wr, kt * T::kBlocks + j)) & 0xffffu;
        const float scale = __uint_as_float(bits << 16);
#pragma unroll
        for (int i = 0; i < 4; ++i) b[jn][i] = Int8PairToBf16x2(codes, i, scale);
      }
    }
#pragma unroll
    for (int i = 0; i < T::kMt; ++i) {
      uint32_t a[2][4];  // elements 8q … 8q + 7 of the group in rows g and g + 8 of m16 tile i
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 w = *reinterpret_cast<const uint4*>(
            a_s + (wm0 + i * 16 + g + 8 * h) * T::kPitch + j * 32 + q * 8);
        a[h][0] = w.x, a[h][1] = w.y, a[h][2] = w.z, a[h][3] = w.w;
      }
#pragma unroll
      for (int jn = 0; jn < T::kNt; ++jn) MmaBf16Group32(acc[i][jn], a[0], a[1], b[jn]);
    }
  }
}

// acc += A_tile · B_tileᵀ over one BK slice (warp tile kWarpM × kWarpN).
template <class T>
__device__ __forceinline__ void ComputeStage(const uint16_t* a_s, const uint16_t* b_s, int wm0,
                                             int wn0, float (&acc)[T::kMt][T::kNt][4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int kk = 0; kk < T::kBk / 16; ++kk) {
    uint32_t af[T::kMt][4];
#pragma unroll
    for (int i = 0; i < T::kMt; ++i) {
      LdMatrixX4(af[i], a_s + (wm0 + i * 16 + (lane & 15)) * T::kPitch + kk * 16 + (lane >> 4) * 8);
    }
    uint32_t bf[T::kNt][2];
#pragma unroll
    for (int jp = 0; jp < T::kNt / 2; ++jp) {
      uint32_t r[4];
      LdMatrixX4(r, b_s + (wn0 + jp * 16 + (lane & 7) + ((lane >> 4) << 3)) * T::kPitch + kk * 16 +
                        ((lane >> 3) & 1) * 8);
      bf[2 * jp][0] = r[0];
      bf[2 * jp][1] = r[1];
      bf[2 * jp + 1][0] = r[2];
      bf[2 * jp + 1][1] = r[3];
    }
#pragma unroll
    for (int i = 0; i < T::kMt; ++i) {
#pragma unroll
      for (int j = 0; j < T::kNt; ++j) MmaBf16(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }
  }
}

// acc += A_tile · B_tileᵀ over one BK slice on wgmma: warp w's 16 rows of A (ldmatrix) with the
// whole B tile, its warpgroup's m64 × kBn accumulators being acc (one m16 row tile of kBn / 8 n8
// tiles: the mma layout, so the epilogue is shared). Returns with the products retired: the
// next iteration's loads may overwrite the stage.
template <class T>
__device__ __forceinline__ void ComputeStageWgmma(const uint16_t* a_s, const uint16_t* b_s, int wm0,
                                                  float (&acc)[T::kMt][T::kNt][4]) {
  static_assert(T::kMt == 1 && T::kNt * 8 == T::kBn, "one m16 slice per warp, all columns");
  const int lane = threadIdx.x & 31;
  uint32_t af[T::kBk / 16][4];
#pragma unroll
  for (int kk = 0; kk < T::kBk / 16; ++kk) {
    LdMatrixX4(af[kk], a_s + (wm0 + (lane & 15)) * T::kPitch + kk * 16 + (lane >> 4) * 8);
  }
  float(&d)[T::kNt * 4] = reinterpret_cast<float(&)[T::kNt * 4]>(acc);
  WgmmaFenceOperands(d);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < T::kBk / 16; ++kk) {
    WgmmaBf16<T::kBn>(d, af[kk], WgmmaDescriptor(b_s + kk * 128, 128, (T::kBk / 8) * 128), true);
  }
  WgmmaCommit();
  WgmmaWait<0>();
  WgmmaFenceOperands(d);
}

// Stores (v0, v1) at columns col, col + 1 of `row` (pitch n): one 8/4-byte store when both are
// inside and n is even (then col is even and the address aligned), else element by element.
__device__ __forceinline__ void StorePair(float* row, int64_t col, int64_t n, float v0, float v1) {
  if (col + 1 < n && (n & 1) == 0) {
    *reinterpret_cast<float2*>(row + col) = make_float2(v0, v1);
  } else {
    if (col < n) row[col] = v0;
    if (col + 1 < n) row[col + 1] = v1;
  }
}
__device__ __forceinline__ void StorePair(uint16_t* row, int64_t col, int64_t n, float v0,
                                          float v1) {
  if (col + 1 < n && (n & 1) == 0) {
    *reinterpret_cast<uint32_t*>(row + col) = static_cast<uint32_t>(FloatToBf16Bits(v0)) |
                                              (static_cast<uint32_t>(FloatToBf16Bits(v1)) << 16);
  } else {
    if (col < n) row[col] = FloatToBf16Bits(v0);
    if (col + 1 < n) row[col + 1] = FloatToBf16Bits(v1);
  }
}

// As GluKernel in norm.cu.
__device__ __forceinline__ float GluValue(float g, float u, const GemmParams& p) {
  if (p.glu_kind == GluKind::kSwiGlu) return SiluF(g) * u;
  const float capped_up = p.beta2 > 0.0f ? p.beta2 * tanhf(u / p.beta2) : u;
  return p.beta1 * tanhf(g / p.beta1) * SigmoidF(g) * capped_up;
}

// Accumulator layout (mma.cuh): acc[i][j][2h + q] is row wm0 + 16i + g + 8h, tile column
// wn0 + 8j + c2 + q. GLU: n8 tiles 2jp (gate) and 2jp + 1 (up) hold outputs wn0/2 + 8jp + c2 + q.
template <class T, bool kGlu, typename OutT>
__device__ __forceinline__ void Epilogue(const float (&acc)[T::kMt][T::kNt][4], const GemmParams& p,
                                         const WorkItem& item, int n_tile, int wm0, int wn0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c2 = 2 * (lane & 3);
  OutT* y = static_cast<OutT*>(p.y);
#pragma unroll
  for (int i = 0; i < T::kMt; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t gr = static_cast<int64_t>(item.row_begin) + wm0 + i * 16 + g + 8 * h;
      if (gr >= item.row_end) continue;
      OutT* yrow = y + gr * p.n_out;
      if constexpr (kGlu) {
        const int64_t col0 = static_cast<int64_t>(n_tile) * (T::kBn / 2) + wn0 / 2 + c2;
#pragma unroll
        for (int jp = 0; jp < T::kNt / 2; ++jp) {
          const float* gate = acc[i][2 * jp];
          const float* up = acc[i][2 * jp + 1];
          StorePair(yrow, col0 + 8 * jp, p.n_out, GluValue(gate[2 * h], up[2 * h], p),
                    GluValue(gate[2 * h + 1], up[2 * h + 1], p));
        }
      } else {
        const int64_t col0 = static_cast<int64_t>(n_tile) * T::kBn + wn0 + c2;
#pragma unroll
        for (int j = 0; j < T::kNt; ++j) {
          StorePair(yrow, col0 + 8 * j, p.n_out, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        }
      }
    }
  }
}

// Grid: (work-list entries × n_tiles), n tile fastest, so the CTAs of one row tile run together
// (x tile from L2) and an expert's few row tiles read each weight tile close in time.
template <class T, WeightFmt kFmt, bool kGlu, typename OutT>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    GroupedGemmKernel(const GemmParams p) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  STRATA_DYNAMIC_SHARED(smem);
  const int item_index = static_cast<int>(blockIdx.x / static_cast<unsigned>(p.n_tiles));
  const int n_tile = static_cast<int>(blockIdx.x - static_cast<unsigned>(item_index) * p.n_tiles);
  if (item_index >= *p.count) return;  // past the work list (uniform per CTA)
  const WorkItem item = p.items[item_index];

  constexpr int kStageBytes = T::StageBytes(kFmt);
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem + T::kStages * kStageBytes);
  if constexpr (kFmt == WeightFmt::kMxfp4) {
    for (int b = threadIdx.x; b < 256; b += T::kThreads) {
      lut[b] = static_cast<uint32_t>(kE2M1Bf16[b & 15]) |
               (static_cast<uint32_t>(kE2M1Bf16[b >> 4]) << 16);
    }
  }
  const int warp = threadIdx.x >> 5;
  const int wm0 = (warp / (T::kBn / T::kWarpN)) * T::kWarpM;
  const int wn0 = (warp % (T::kBn / T::kWarpN)) * T::kWarpN;
  float acc[T::kMt][T::kNt][4];
#pragma unroll
  for (int i = 0; i < T::kMt; ++i) {
#pragma unroll
    for (int j = 0; j < T::kNt; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0;
  }

  const int k_tiles = static_cast<int>((p.k + T::kBk - 1) / T::kBk);
#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < k_tiles) LoadStage<T, kFmt, kGlu>(smem + s * kStageBytes, p, item, n_tile, s);
    CpAsyncCommit();  // empty groups keep the wait count uniform
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    CpAsyncWait<T::kStages - 2>();
    if constexpr (T::kWgmma) FenceProxyAsync();  // the stage's B, before wgmma reads it
    __syncthreads();  // stage kt visible; every warp is done with iteration kt − 1
    const int next = kt + T::kStages - 1;
    if (next < k_tiles) {
      LoadStage<T, kFmt, kGlu>(smem + (next % T::kStages) * kStageBytes, p, item, n_tile, next);
    }
    CpAsyncCommit();
    const unsigned char* stage = smem + (kt % T::kStages) * kStageBytes;
    if constexpr (T::kWgmma) {
      static_assert(kFmt == WeightFmt::kBf16, "the wgmma tile takes bf16 weights");
      ComputeStageWgmma<T>(reinterpret_cast<const uint16_t*>(stage),
                           reinterpret_cast<const uint16_t*>(stage + T::kABytes), wm0, acc);
    } else if constexpr (kFmt == WeightFmt::kBf16) {
      ComputeStage<T>(reinterpret_cast<const uint16_t*>(stage),
                      reinterpret_cast<const uint16_t*>(stage + T::kABytes), wm0, wn0, acc);
    } else {
      ComputeStageDecoded<T, kFmt, kGlu>(stage, lut, p, item, n_tile, kt, wm0, wn0, acc);
    }
  }
  CpAsyncWait<0>();
  Epilogue<T, kGlu, OutT>(acc, p, item, n_tile, wm0, wn0);
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

template <class T, WeightFmt kFmt, bool kGlu, typename OutT>
absl::Status LaunchGemm(const GemmParams& p, int64_t capacity, cudaStream_t stream) {
  constexpr int kSmem = T::SmemBytes(kFmt);
  const auto kernel = GroupedGemmKernel<T, kFmt, kGlu, OutT>;
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
      "GroupedGemmKernel cudaFuncSetAttribute");
  const int64_t blocks = capacity * p.n_tiles;
  if (blocks > INT_MAX) {
    return absl::InvalidArgumentError("GroupedGemm: (row tiles + E) · column tiles must be < 2^31");
  }
  internal::LaunchKernel(kernel, static_cast<unsigned>(blocks), T::kThreads, kSmem, stream, p);
  return LaunchStatus("GroupedGemmKernel launch");
}

template <class T, bool kGlu, typename OutT>
absl::Status Launch(WeightFmt fmt, const GemmParams& p, int64_t capacity, cudaStream_t stream) {
  switch (fmt) {
    case WeightFmt::kBf16:
      return LaunchGemm<T, WeightFmt::kBf16, kGlu, OutT>(p, capacity, stream);
    case WeightFmt::kMxfp4:
      return LaunchGemm<T, WeightFmt::kMxfp4, kGlu, OutT>(p, capacity, stream);
    case WeightFmt::kInt8:
      return LaunchGemm<T, WeightFmt::kInt8, kGlu, OutT>(p, capacity, stream);
  }
  return absl::InternalError("GroupedGemm: unknown weight format");
}

absl::Status CheckArgs(const char* name, const uint16_t* x_perm, const int32_t* offsets,
                       int num_experts, int64_t rows, const GroupedWeights& w, int64_t n_out,
                       int64_t k, const void* y, void* workspace, int64_t workspace_bytes) {
  auto fail = [name](const char* what) {
    return absl::InvalidArgumentError(std::string(name) + ": " + what);
  };
  if (num_experts < 1) return fail("num_experts must be >= 1");
  if (rows < 0 || rows > INT_MAX) return fail("rows must be in [0, 2^31)");
  if (n_out < 1 || k < 1) return fail("n (or inter) and k must be >= 1");
  if (x_perm == nullptr || y == nullptr) return fail("x_perm and the output must be non-null");
  if (offsets == nullptr && num_experts != 1) {
    return fail("expert_offsets may be null only with one expert");
  }
  const bool bf16 = w.bf16 != nullptr, mxfp4 = w.mxfp4_packed != nullptr,
             int8 = w.int8_codes != nullptr;
  if (int{bf16} + int{mxfp4} + int{int8} != 1) {
    return fail(
        "exactly one of weights.bf16 / weights.mxfp4_packed / weights.int8_codes is needed");
  }
  if (mxfp4 && w.mxfp4_scales == nullptr) return fail("MXFP4 weights need mxfp4_scales");
  if (int8 && w.int8_scales == nullptr) return fail("int8 weights need int8_scales");
  if (int8 && reinterpret_cast<uintptr_t>(w.int8_scales) % 2 != 0) {
    return fail("int8_scales must be 2-byte aligned");
  }
  if (k >= (int64_t{1} << 24)) return fail("k must be < 2^24");
  if (bf16 && k % 8 != 0) return fail("k must be a multiple of 8 for bf16 weights");
  if (!bf16 && k % 32 != 0) return fail("k must be a multiple of 32 for MXFP4 or int8 weights");
  const void* w_main = bf16    ? static_cast<const void*>(w.bf16)
                       : mxfp4 ? static_cast<const void*>(w.mxfp4_packed)
                               : static_cast<const void*>(w.int8_codes);
  if (!Aligned16(x_perm) || !Aligned16(y) || !Aligned16(w_main)) {
    return fail(
        "x_perm, the weights (bf16, MXFP4 packed or int8 codes) and the output must be 16-byte "
        "aligned");
  }
  if (workspace == nullptr || !Aligned16(workspace) ||
      workspace_bytes < GroupedGemmWorkspaceBytes(num_experts, rows)) {
    return fail("workspace must be 16-byte aligned and >= GroupedGemmWorkspaceBytes(E, rows)");
  }
  return absl::OkStatus();
}

template <bool kGlu, typename OutT>
absl::Status Run(const char* name, const uint16_t* x_perm, const int32_t* offsets, int num_experts,
                 int64_t rows, const GroupedWeights& w, int64_t n_w, int64_t n_out, int64_t k,
                 const GluParams& glu, OutT* y, GroupedGemmTile tile, void* workspace,
                 int64_t workspace_bytes, cudaStream_t stream, const GroupedGemmOptions& options) {
  absl::Status status = CheckArgs(name, x_perm, offsets, num_experts, rows, w, n_out, k, y,
                                  workspace, workspace_bytes);
  if (!status.ok()) return status;
  if (n_w * k >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(std::string(name) +
                                      ": one expert's matrix (n_w·k) must have < 2^31 elements");
  }
  if (options.x_rows != nullptr && options.x_row_count < 1) {
    return absl::InvalidArgumentError(std::string(name) + ": x_rows needs x_row_count >= 1");
  }
  if (kGlu && glu.kind == GluKind::kSitu && !(glu.beta1 > 0.0f)) {
    return absl::InvalidArgumentError(std::string(name) + ": SiTU needs beta1 > 0");
  }
  if (tile == GroupedGemmTile::kLargeWgmma && (w.bf16 == nullptr || !WgmmaAvailable())) {
    return absl::InvalidArgumentError(std::string(name) +
                                      ": the wgmma tile needs bf16 weights and an sm_90 device");
  }
  if (rows == 0) return absl::OkStatus();
  if (tile == GroupedGemmTile::kAuto) {
    tile = rows < 64 * static_cast<int64_t>(num_experts) ? GroupedGemmTile::kSmall
           : w.bf16 != nullptr && WgmmaChosen()          ? GroupedGemmTile::kLargeWgmma
                                                         : GroupedGemmTile::kLarge;
  }
  const bool large = tile != GroupedGemmTile::kSmall;
  const int bm = large ? LargeTile::kBm : SmallTile::kBm;
  const int64_t capacity = (rows + bm - 1) / bm + num_experts;
  int32_t* count = static_cast<int32_t*>(workspace);
  WorkItem* items =
      reinterpret_cast<WorkItem*>(static_cast<unsigned char*>(workspace) + kListHeaderBytes);
  if (!options.reuse_work_list) {
    internal::LaunchKernel(BuildWorkListKernel, 1, kListThreads, 0, stream, offsets, num_experts,
                           static_cast<int>(rows), bm, static_cast<int>(capacity), count, items);
    STRATA_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "GroupedGemm BuildWorkListKernel launch");
  }

  GemmParams p{};
  p.x = x_perm;
  p.x_rows = options.x_rows;
  p.x_row_count = options.x_row_count;
  p.w_bf16 = w.bf16;
  p.w_packed = w.mxfp4_packed;
  p.w_codes = w.int8_codes;
  const WeightFmt fmt = w.bf16 != nullptr           ? WeightFmt::kBf16
                        : w.mxfp4_packed != nullptr ? WeightFmt::kMxfp4
                                                    : WeightFmt::kInt8;
  if (fmt == WeightFmt::kInt8) {
    p.w_scales = w.int8_scales;
    p.scales_end = reinterpret_cast<uintptr_t>(w.int8_scales) + num_experts * n_w * (k / 32) * 2;
  } else {
    p.w_scales = w.mxfp4_scales;
    p.scales_end = reinterpret_cast<uintptr_t>(w.mxfp4_scales) + num_experts * n_w * (k / 32);
  }
  p.count = count;
  p.items = items;
  p.y = y;
  p.k = k;
  p.n_w = n_w;
  p.n_out = n_out;
  const int64_t cols_per_tile = kGlu ? LargeTile::kBn / 2 : LargeTile::kBn;  // same BN for both
  const int64_t n_tiles = (n_out + cols_per_tile - 1) / cols_per_tile;
  if (n_tiles > INT_MAX) return absl::InvalidArgumentError(std::string(name) + ": n too large");
  p.n_tiles = static_cast<int>(n_tiles);
  p.glu_kind = glu.kind;
  p.beta1 = glu.beta1;
  p.beta2 = glu.beta2;
  if (tile == GroupedGemmTile::kLargeWgmma) {
    return LaunchGemm<WgmmaTile, WeightFmt::kBf16, kGlu, OutT>(p, capacity, stream);
  }
  return large ? Launch<LargeTile, kGlu, OutT>(fmt, p, capacity, stream)
               : Launch<SmallTile, kGlu, OutT>(fmt, p, capacity, stream);
}

static_assert(LargeTile::kBn == SmallTile::kBn, "Run() sizes the column tiles from one BN");

}  // namespace

int64_t GroupedGemmWorkspaceBytes(int num_experts, int64_t rows) {
  const int64_t entries =
      (std::max<int64_t>(rows, 0) + kMinTileRows - 1) / kMinTileRows + std::max(num_experts, 0);
  return kListHeaderBytes + entries * static_cast<int64_t>(sizeof(WorkItem));
}

absl::Status GroupedGemm(const uint16_t* x_perm, const int32_t* expert_offsets, int num_experts,
                         int64_t rows, const GroupedWeights& w, int64_t n, int64_t k, float* y_perm,
                         GroupedGemmTile tile, void* workspace, int64_t workspace_bytes,
                         cudaStream_t stream, const GroupedGemmOptions& options) {
  return Run<false>("GroupedGemm", x_perm, expert_offsets, num_experts, rows, w, n, n, k,
                    GluParams{}, y_perm, tile, workspace, workspace_bytes, stream, options);
}

absl::Status GroupedGemm(const uint16_t* x_perm, const int32_t* expert_offsets, int num_experts,
                         int64_t rows, const GroupedWeights& w, int64_t n, int64_t k,
                         uint16_t* y_perm, GroupedGemmTile tile, void* workspace,
                         int64_t workspace_bytes, cudaStream_t stream,
                         const GroupedGemmOptions& options) {
  return Run<false>("GroupedGemm", x_perm, expert_offsets, num_experts, rows, w, n, n, k,
                    GluParams{}, y_perm, tile, workspace, workspace_bytes, stream, options);
}

absl::Status GroupedGemmGlu(const uint16_t* x_perm, const int32_t* expert_offsets, int num_experts,
                            int64_t rows, const GroupedWeights& w_gate_up, int64_t inter, int64_t k,
                            const GluParams& glu, uint16_t* h_perm, GroupedGemmTile tile,
                            void* workspace, int64_t workspace_bytes, cudaStream_t stream,
                            const GroupedGemmOptions& options) {
  return Run<true>("GroupedGemmGlu", x_perm, expert_offsets, num_experts, rows, w_gate_up,
                   2 * inter, inter, k, glu, h_perm, tile, workspace, workspace_bytes, stream,
                   options);
}

}  // namespace strata::kernels::cuda
