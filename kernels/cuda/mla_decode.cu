#include "kernels/cuda/mla_decode.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/hopper.cuh"
#include "kernels/cuda/internal/latent_fp8.cuh"
#include "kernels/cuda/internal/launch.cuh"
#include "kernels/cuda/internal/mla_split.cuh"
#include "kernels/cuda/internal/mma.cuh"
#include "kernels/cuda/mla_decode_wgmma.h"
#include "kernels/cuda/wgmma.h"

namespace strata::kernels::cuda {
namespace {

using internal::Bf16BitsToFloat;
using internal::CpAsync16;
using internal::CpAsyncCommit;
using internal::CpAsyncWait;
using internal::FloatToBf16Bits;
using internal::Fp8RowChunkToBf16;
using internal::Fp8RowValue;
using internal::kFp8RowBytes;
using internal::kFp8RowChunks;
using internal::LdMatrixX4;
using internal::LdMatrixX4Trans;
using internal::MlaSplit;
using internal::MlaSplitOfThisCta;
using internal::MmaBf16;
using internal::StoreOut;
using internal::WarpMax;
using internal::WarpSum;
using internal::WriteEmptySplit;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kHeadsPerCta = 32;  // two m16 row tiles
constexpr int kThreads = 256;     // 8 warps
// Shared-memory rows are padded by 16 bytes so that the 8 row addresses of an ldmatrix fall
// in distinct banks (row pitch 1168 B = 292 words ≡ 4 mod 32).
constexpr int kRowStride = kMlaLatentDim + 8;     // bf16 elements
constexpr int kScoreStride = kMlaPageSize + 4;    // f32 elements
constexpr int kProbStride = kMlaPageSize + 8;     // bf16 elements (144 B ≡ 4 words mod 32)
constexpr int kChunksPerRow = kMlaLatentDim / 8;  // 16-byte chunks per latent row

constexpr int kQBytes = kHeadsPerCta * kRowStride * 2;
constexpr int kPageBytes = kMlaPageSize * kRowStride * 2;
constexpr int kScoreBytes = kHeadsPerCta * kScoreStride * 4;
constexpr int kProbBytes = kHeadsPerCta * kProbStride * 2;
constexpr int kStatBytes = 3 * kHeadsPerCta * 4;
// An fp8 cache (core/latent_row.h) stages raw 656-byte rows, double-buffered with cp.async, and
// dequantizes each page into one bf16 page buffer before the tensor-core phases read it.
constexpr int kStageBytes = kMlaPageSize * kFp8RowBytes;
template <bool kFp8>
constexpr int kPageBufferBytes = kFp8 ? kPageBytes + 2 * kStageBytes : 2 * kPageBytes;
template <bool kFp8>
constexpr int kSmemBytes = kQBytes + kPageBufferBytes<kFp8> + kScoreBytes + kProbBytes + kStatBytes;
static_assert(kQBytes % 16 == 0 && kPageBytes % 16 == 0 && kScoreBytes % 16 == 0 &&
                  kProbBytes % 16 == 0 && kStageBytes % 16 == 0,
              "shared regions must stay 16-byte aligned");
static_assert(kSmemBytes<false> <= 227 * 1024 && kSmemBytes<true> <= 227 * 1024,
              "exceeds the sm_90 shared-memory limit");

// Starts the copy of one 64-token page into shared memory; rows ≥ valid_tokens are zero-filled
// (their P is 0, and 0 · garbage could be NaN).
__device__ __forceinline__ void LoadPage(uint16_t* dst, const uint16_t* kv_cache, int32_t block,
                                         int valid_tokens) {
  if (block < 0) valid_tokens = 0;
  const uint16_t* src =
      kv_cache + static_cast<int64_t>(block < 0 ? 0 : block) * kMlaPageSize * kMlaLatentDim;
  for (int c = threadIdx.x; c < kMlaPageSize * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const bool valid = row < valid_tokens;
    CpAsync16(dst + row * kRowStride + col, valid ? src + row * kMlaLatentDim + col : kv_cache,
              valid);
  }
}

// Starts the copy of one 64-token page of fp8 rows into a staging buffer; rows ≥ valid_tokens
// are zero-filled.
__device__ __forceinline__ void LoadStage(uint8_t* dst, const uint8_t* kv_cache, int32_t block,
                                          int valid_tokens) {
  if (block < 0) valid_tokens = 0;
  constexpr int kChunks = kFp8RowBytes / 16;
  const uint8_t* src = kv_cache + static_cast<int64_t>(block < 0 ? 0 : block) * kStageBytes;
  for (int c = threadIdx.x; c < kMlaPageSize * kChunks; c += kThreads) {
    const int row = c / kChunks, col = (c % kChunks) * 16;
    const bool valid = row < valid_tokens;
    CpAsync16(dst + row * kFp8RowBytes + col, valid ? src + row * kFp8RowBytes + col : kv_cache,
              valid);
  }
}

// The staged fp8 page as bf16 rows in the page buffer (rows ≥ valid_tokens zero).
__device__ __forceinline__ void DequantizeStage(uint16_t* dst, const uint8_t* stage,
                                                int valid_tokens) {
  for (int c = threadIdx.x; c < kMlaPageSize * kFp8RowChunks; c += kThreads) {
    const int row = c / kFp8RowChunks, chunk = c % kFp8RowChunks;
    *reinterpret_cast<uint4*>(dst + row * kRowStride + chunk * 8) =
        row < valid_tokens ? Fp8RowChunkToBf16(stage + row * kFp8RowBytes, chunk)
                           : make_uint4(0u, 0u, 0u, 0u);
  }
}

// Grid (head groups, splits, batch). Writes the split's normalised ō rows into o_part
// [batch, splits, H, 512] and its log2-domain LSE into lse_part [batch, splits, H].
// kv_cache: bf16 rows, or fp8 rows when kFp8.
template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1)
    MlaDecodeKernel(const uint16_t* __restrict__ q_abs, const void* __restrict__ kv_cache,
                    const int32_t* __restrict__ block_table, const int32_t* __restrict__ query_seq,
                    const int32_t* __restrict__ seq_lens, int num_heads, int max_blocks_per_seq,
                    int pages_per_split, int num_splits, float scale_log2,
                    float* __restrict__ o_part, float* __restrict__ lse_part) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  STRATA_DYNAMIC_SHARED(smem);
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem);
  // bf16: two page buffers; fp8: one page buffer and two staging buffers.
  uint16_t* kv_s0 = reinterpret_cast<uint16_t*>(smem + kQBytes);
  uint16_t* kv_s1 = reinterpret_cast<uint16_t*>(smem + kQBytes + kPageBytes);
  uint8_t* stage0 = reinterpret_cast<uint8_t*>(smem + kQBytes + kPageBytes);
  uint8_t* stage1 = stage0 + kStageBytes;
  constexpr int kBuffers = kPageBufferBytes<kFp8>;
  float* s_s = reinterpret_cast<float*>(smem + kQBytes + kBuffers);
  uint16_t* p_s = reinterpret_cast<uint16_t*>(smem + kQBytes + kBuffers + kScoreBytes);
  float* row_m = reinterpret_cast<float*>(smem + kQBytes + kBuffers + kScoreBytes + kProbBytes);
  const auto* cache16 = static_cast<const uint16_t*>(kv_cache);
  const auto* cache8 = static_cast<const uint8_t*>(kv_cache);
  float* row_l = row_m + kHeadsPerCta;
  float* row_alpha = row_l + kHeadsPerCta;

  const MlaSplit sp =
      MlaSplitOfThisCta(seq_lens, num_heads, kHeadsPerCta, pages_per_split, num_splits);
  if (sp.page_begin >= sp.page_end) {  // nothing to attend to in this split
    WriteEmptySplit(sp, o_part, lse_part);
    return;
  }
  const int b = blockIdx.z, head0 = sp.head0, heads_here = sp.heads_here, seq_len = sp.seq_len;
  const int page_begin = sp.page_begin, page_end = sp.page_end;
  const int64_t part_row0 = sp.part_row0;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Q rows (zero past the last head) and the first page form the first cp.async group.
  const uint16_t* q_src = q_abs + (static_cast<int64_t>(b) * num_heads + head0) * kMlaLatentDim;
  for (int c = tid; c < kHeadsPerCta * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const bool valid = row < heads_here;
    CpAsync16(q_s + row * kRowStride + col, valid ? q_src + row * kMlaLatentDim + col : q_abs,
              valid);
  }
  const int64_t table_row = query_seq != nullptr ? query_seq[b] : b;
  const int32_t* table = block_table + table_row * max_blocks_per_seq;
  const int first_valid = min(kMlaPageSize, seq_len - page_begin * kMlaPageSize);
  if constexpr (kFp8) {
    LoadStage(stage0, cache8, table[page_begin], first_valid);
  } else {
    LoadPage(kv_s0, cache16, table[page_begin], first_valid);
  }
  CpAsyncCommit();
  if (tid < kHeadsPerCta) {
    row_m[tid] = -INFINITY;
    row_l[tid] = 0.0f;
  }

  const int mt = warp & 1;    // row tile: heads mt·16 .. +16
  const int grp = warp >> 1;  // S phase: tokens grp·16 .. +16; P·V phase: dims grp·128 .. +128
  const int g = lane >> 2, c2 = 2 * (lane & 3);
  float acc[16][4];
#pragma unroll
  for (int n = 0; n < 16; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  for (int p = page_begin; p < page_end; ++p) {
    const int it = p - page_begin;
    const uint16_t* kv_cur = (it & 1) && !kFp8 ? kv_s1 : kv_s0;
    if (p + 1 < page_end) {
      const int next_valid = min(kMlaPageSize, seq_len - (p + 1) * kMlaPageSize);
      if constexpr (kFp8) {
        LoadStage((it & 1) ? stage0 : stage1, cache8, table[p + 1], next_valid);
      } else {
        LoadPage((it & 1) ? kv_s0 : kv_s1, cache16, table[p + 1], next_valid);
      }
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    if constexpr (kFp8) {  // the previous page's phases are done (barrier at the loop's end)
      DequantizeStage(kv_s0, (it & 1) ? stage1 : stage0,
                      min(kMlaPageSize, seq_len - p * kMlaPageSize));
      __syncthreads();
    }

    // Phase 1: S[16 heads, 16 tokens] = Q · Kᵀ over the 576 latent dims.
    float sacc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const uint16_t* a_row = q_s + (mt * 16 + (lane & 15)) * kRowStride + (lane >> 4) * 8;
    const uint16_t* b_row =
        kv_cur + (grp * 16 + (lane & 7) + ((lane >> 4) << 3)) * kRowStride + ((lane >> 3) & 1) * 8;
#pragma unroll 4
    for (int kk = 0; kk < kMlaLatentDim / 16; ++kk) {
      uint32_t a[4], bk[4];
      LdMatrixX4(a, a_row + kk * 16);
      LdMatrixX4(bk, b_row + kk * 16);
      MmaBf16(sacc[0], a, bk[0], bk[1]);
      MmaBf16(sacc[1], a, bk[2], bk[3]);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = mt * 16 + g + half * 8;
        const int col = grp * 16 + j * 8 + c2;
        const int token = p * kMlaPageSize + col;
        s_s[row * kScoreStride + col] =
            token < seq_len ? sacc[j][half * 2] * scale_log2 : -INFINITY;
        s_s[row * kScoreStride + col + 1] =
            token + 1 < seq_len ? sacc[j][half * 2 + 1] * scale_log2 : -INFINITY;
      }
    }
    __syncthreads();

    // Phase 2: online softmax, 4 rows per warp, 2 tokens per lane. The page holds ≥ 1 valid
    // token, so m_new is finite. l sums the bf16-rounded P that the P·V product uses.
#pragma unroll
    for (int rr = 0; rr < kHeadsPerCta / 8; ++rr) {
      const int row = warp * (kHeadsPerCta / 8) + rr;
      const float v0 = s_s[row * kScoreStride + lane];
      const float v1 = s_s[row * kScoreStride + lane + 32];
      const float m_old = row_m[row];
      const float m_new = fmaxf(m_old, WarpMax(fmaxf(v0, v1)));
      const uint16_t p0 = FloatToBf16Bits(exp2f(v0 - m_new));
      const uint16_t p1 = FloatToBf16Bits(exp2f(v1 - m_new));
      p_s[row * kProbStride + lane] = p0;
      p_s[row * kProbStride + lane + 32] = p1;
      const float sum = WarpSum(Bf16BitsToFloat(p0) + Bf16BitsToFloat(p1));
      __syncwarp();  // every lane has read row_m[row] before lane 0 rewrites it
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_new);  // 0 on the first page (m_old = −∞)
        row_alpha[row] = alpha;
        row_l[row] = row_l[row] * alpha + sum;
        row_m[row] = m_new;
      }
    }
    __syncthreads();

    // Phase 3: O[16 heads, 128 dims] = alpha ⊙ O + P[16, 64] · V[64, 128].
    const float alpha_lo = row_alpha[mt * 16 + g];
    const float alpha_hi = row_alpha[mt * 16 + g + 8];
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      acc[n][0] *= alpha_lo;
      acc[n][1] *= alpha_lo;
      acc[n][2] *= alpha_hi;
      acc[n][3] *= alpha_hi;
    }
    const uint16_t* pa_row = p_s + (mt * 16 + (lane & 15)) * kProbStride + (lane >> 4) * 8;
    const uint16_t* v_row =
        kv_cur + ((lane & 7) + (((lane >> 3) & 1) << 3)) * kRowStride + grp * 128 + (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < kMlaPageSize / 16; ++kk) {
      uint32_t a[4];
      LdMatrixX4(a, pa_row + kk * 16);
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        uint32_t bv[4];
        LdMatrixX4Trans(bv, v_row + kk * 16 * kRowStride + np * 16);
        MmaBf16(acc[2 * np], a, bv[0], bv[1]);
        MmaBf16(acc[2 * np + 1], a, bv[2], bv[3]);
      }
    }
    __syncthreads();  // the next iteration overwrites this page buffer, s_s and p_s
  }

  const int r_lo = mt * 16 + g, r_hi = r_lo + 8;
  const float inv_lo = 1.0f / row_l[r_lo];
  const float inv_hi = 1.0f / row_l[r_hi];
#pragma unroll
  for (int n = 0; n < 16; ++n) {
    const int col = grp * 128 + n * 8 + c2;
    if (r_lo < heads_here) {
      *reinterpret_cast<float2*>(o_part + (part_row0 + r_lo) * kMlaValueDim + col) =
          make_float2(acc[n][0] * inv_lo, acc[n][1] * inv_lo);
    }
    if (r_hi < heads_here) {
      *reinterpret_cast<float2*>(o_part + (part_row0 + r_hi) * kMlaValueDim + col) =
          make_float2(acc[n][2] * inv_hi, acc[n][3] * inv_hi);
    }
  }
  if (tid < heads_here) lse_part[part_row0 + tid] = row_m[tid] + log2f(row_l[tid]);
}

constexpr float kLn2 = 0.6931471805599453f;

// Grid (H, batch), 128 threads × 4 dims: out = Σ_s 2^(lse_s − m) ō_s / Σ_s 2^(lse_s − m), rows
// of `out_stride` values. kWithLse: value 512 of each row is the merged LSE in the natural-log
// domain, ln Σ_j e^(scale · q̃·κ_j) (−∞ when no split saw a row): MlaPagedPartial's layout.
template <typename OutT, bool kWithLse = false>
__global__ void MlaCombineKernel(const float* __restrict__ o_part,
                                 const float* __restrict__ lse_part, int num_heads, int num_splits,
                                 OutT* __restrict__ out, int out_stride = kMlaValueDim) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int h = blockIdx.x, b = blockIdx.y;
  const int64_t first = static_cast<int64_t>(b) * num_splits * num_heads + h;
  float m = -INFINITY;
  for (int s = 0; s < num_splits; ++s) m = fmaxf(m, lse_part[first + s * num_heads]);
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float weight_sum = 0.0f;
  if (m != -INFINITY) {
    for (int s = 0; s < num_splits; ++s) {
      const int64_t row = first + static_cast<int64_t>(s) * num_heads;
      const float w = exp2f(lse_part[row] - m);
      if (w == 0.0f) continue;
      const float4 o = reinterpret_cast<const float4*>(o_part + row * kMlaValueDim)[threadIdx.x];
      weight_sum += w;
      acc.x += w * o.x;
      acc.y += w * o.y;
      acc.z += w * o.z;
      acc.w += w * o.w;
    }
  }
  const float inv = weight_sum > 0.0f ? 1.0f / weight_sum : 0.0f;
  OutT* row = out + (static_cast<int64_t>(b) * num_heads + h) * out_stride;
  OutT* dst = row + 4 * threadIdx.x;
  StoreOut(dst + 0, acc.x * inv);
  StoreOut(dst + 1, acc.y * inv);
  StoreOut(dst + 2, acc.z * inv);
  StoreOut(dst + 3, acc.w * inv);
  if constexpr (kWithLse) {
    if (threadIdx.x == 0) {
      StoreOut(row + kMlaValueDim, weight_sum > 0.0f ? (m + log2f(weight_sum)) * kLn2 : -INFINITY);
    }
  }
}

// Grid (items), 128 threads × 4 dims: out[i] = Σ_p e^(lse_p − L) ō_p, L = ln Σ_p e^(lse_p), over
// the parts' [ō (512) ; lse] rows partials[p · num_items + i] (MlaMergePartials).
__global__ void MlaMergePartialsKernel(const float* __restrict__ partials, int parts,
                                       int64_t num_items, uint16_t* __restrict__ out) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  constexpr int kRow = kMlaValueDim + 1;
  const int64_t item = blockIdx.x;
  float m = -INFINITY;
  for (int p = 0; p < parts; ++p) {
    m = fmaxf(m, partials[(p * num_items + item) * kRow + kMlaValueDim]);
  }
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float weight_sum = 0.0f;
  if (m != -INFINITY) {
    for (int p = 0; p < parts; ++p) {
      const float* row = partials + (p * num_items + item) * kRow;
      const float w = expf(row[kMlaValueDim] - m);
      if (w == 0.0f) continue;
      weight_sum += w;
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[k] += w * row[4 * threadIdx.x + k];
    }
  }
  const float inv = weight_sum > 0.0f ? 1.0f / weight_sum : 0.0f;
  uint16_t* dst = out + item * kMlaValueDim + 4 * threadIdx.x;
#pragma unroll
  for (int k = 0; k < 4; ++k) StoreOut(dst + k, acc[k] * inv);
}

// Latent values d and d + 1 (d even) of cache row `row_index`: bf16, or fp8 decoded in f32.
template <bool kFp8>
__device__ __forceinline__ float2 LatentPair(const void* kv_cache, int64_t row_index, int d) {
  if constexpr (kFp8) {
    const uint8_t* row = static_cast<const uint8_t*>(kv_cache) + row_index * kFp8RowBytes;
    return make_float2(Fp8RowValue(row, d), Fp8RowValue(row, d + 1));
  } else {
    const uint32_t pair = *reinterpret_cast<const uint32_t*>(
        static_cast<const uint16_t*>(kv_cache) + row_index * kMlaLatentDim + d);
    return make_float2(Bf16BitsToFloat(pair & 0xffffu), Bf16BitsToFloat(pair >> 16));
  }
}

// Grid (H, batch), 8 warps. Warp w takes tokens w, w+8, ...; lane owns latent dims
// 2·lane + 64·i. Per-warp online softmax, merged through shared memory at the end.
template <bool kFp8>
__global__ void __launch_bounds__(256)
    MlaDecodeSimpleKernel(const uint16_t* __restrict__ q_abs, const void* __restrict__ kv_cache,
                          const int32_t* __restrict__ block_table,
                          const int32_t* __restrict__ seq_lens, int num_heads,
                          int max_blocks_per_seq, float scale_log2, float* __restrict__ out) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ float q_s[kMlaLatentDim];
  __shared__ float warp_m[8], warp_l[8];
  __shared__ float warp_acc[8][kMlaValueDim];
  const int h = blockIdx.x, b = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint16_t* q = q_abs + (static_cast<int64_t>(b) * num_heads + h) * kMlaLatentDim;
  for (int i = threadIdx.x; i < kMlaLatentDim; i += blockDim.x) q_s[i] = Bf16BitsToFloat(q[i]);
  __syncthreads();
  const int seq_len = seq_lens[b];
  const int32_t* table = block_table + static_cast<int64_t>(b) * max_blocks_per_seq;
  float m = -INFINITY, l = 0.0f;
  float acc[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i] = 0.0f;
  for (int j = warp; j < seq_len; j += 8) {
    const int64_t row = table[j / kMlaPageSize] * kMlaPageSize + j % kMlaPageSize;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kMlaLatentDim / 64; ++i) {
      const int d = 2 * lane + 64 * i;
      const float2 v = LatentPair<kFp8>(kv_cache, row, d);
      s += q_s[d] * v.x + q_s[d + 1] * v.y;
    }
    s = WarpSum(s) * scale_log2;
    const float m_new = fmaxf(m, s);
    const float alpha = exp2f(m - m_new), pj = exp2f(s - m_new);
    l = l * alpha + pj;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float2 v = LatentPair<kFp8>(kv_cache, row, 2 * lane + 64 * i);
      acc[2 * i] = acc[2 * i] * alpha + pj * v.x;
      acc[2 * i + 1] = acc[2 * i + 1] * alpha + pj * v.y;
    }
    m = m_new;
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    warp_acc[warp][2 * lane + 64 * i] = acc[2 * i];
    warp_acc[warp][2 * lane + 64 * i + 1] = acc[2 * i + 1];
  }
  __syncthreads();
  float m_all = -INFINITY;
  for (int w = 0; w < 8; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float l_all = 0.0f;
  float scale_w[8];
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    scale_w[w] = m_all == -INFINITY ? 0.0f : exp2f(warp_m[w] - m_all);
    l_all += warp_l[w] * scale_w[w];
  }
  const float inv = l_all > 0.0f ? 1.0f / l_all : 0.0f;
  float* dst = out + (static_cast<int64_t>(b) * num_heads + h) * kMlaValueDim;
  for (int d = threadIdx.x; d < kMlaValueDim; d += blockDim.x) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < 8; ++w) sum += warp_acc[w][d] * scale_w[w];
    dst[d] = sum * inv;
  }
}

// q_abs[b, h, 512 + i] = q[b, h, dn + i] for the 64 rope dims. Grid (H, batch), 64 threads.
__global__ void CopyRopeKernel(const uint16_t* __restrict__ q, int num_heads, int dn,
                               uint16_t* __restrict__ q_abs) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t bh = static_cast<int64_t>(blockIdx.y) * num_heads + blockIdx.x;
  q_abs[bh * kMlaLatentDim + kMlaValueDim + threadIdx.x] =
      q[bh * (dn + kMlaRopeDim) + dn + threadIdx.x];
}

int HeadsPerCta(const MlaDecodeParams& p) {
  return MlaDecodeUsesWgmma(p) ? internal::MlaWgmmaHeadTile(p.num_heads) : kHeadsPerCta;
}

int MaxPages(const MlaDecodeParams& p) {
  return std::max(1, (p.max_context + kMlaPageSize - 1) / kMlaPageSize);
}

int PagesPerSplit(const MlaDecodeParams& p, int splits) {
  return (MaxPages(p) + splits - 1) / splits;
}

absl::Status CheckCacheDType(const MlaDecodeParams& p) {
  if (p.cache_dtype != LatentDType::kBF16 && p.cache_dtype != LatentDType::kFP8) {
    return absl::InvalidArgumentError("MlaPagedDecode: the cache must hold bf16 or fp8 rows");
  }
  return absl::OkStatus();
}

absl::Status CheckParams(const MlaDecodeParams& p, const void* workspace, int64_t ws_bytes) {
  if (p.batch < 0 || p.batch > 65535 || p.num_heads <= 0 || p.max_blocks_per_seq <= 0 ||
      p.max_context < 0 || p.num_splits < 0) {
    return absl::InvalidArgumentError("MlaPagedDecode: bad params");
  }
  RETURN_IF_ERROR(CheckCacheDType(p));
  if (p.kernel == MlaDecodeKernel::kWgmma && !WgmmaAvailable()) {
    return absl::InvalidArgumentError("MlaPagedDecode: the wgmma kernel needs an sm_90 device");
  }
  if (static_cast<int64_t>(p.max_blocks_per_seq) * kMlaPageSize < p.max_context) {
    return absl::InvalidArgumentError("MlaPagedDecode: max_context exceeds the block table");
  }
  if (ws_bytes < MlaDecodeWorkspaceBytes(p) || (p.batch > 0 && workspace == nullptr)) {
    return absl::InvalidArgumentError("MlaPagedDecode: workspace too small");
  }
  return absl::OkStatus();
}

template <bool kFp8>
absl::Status LaunchMmaSync(const uint16_t* q_abs, const void* kv_cache, const int32_t* block_table,
                           const int32_t* query_seq, const int32_t* seq_lens,
                           const MlaDecodeParams& p, int splits, float* o_part, float* lse_part,
                           cudaStream_t stream) {
  const int head_groups = (p.num_heads + kHeadsPerCta - 1) / kHeadsPerCta;
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(MlaDecodeKernel<kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kSmemBytes<kFp8>),
      "MlaPagedDecode cudaFuncSetAttribute");
  const dim3 grid(head_groups, splits, p.batch);
  internal::LaunchKernel(MlaDecodeKernel<kFp8>, grid, kThreads, kSmemBytes<kFp8>, stream, q_abs,
                         kv_cache, block_table, query_seq, seq_lens, p.num_heads,
                         p.max_blocks_per_seq, PagesPerSplit(p, splits), splits, p.scale * kLog2e,
                         o_part, lse_part);
  return LaunchStatus("MlaDecodeKernel launch");
}

template <bool kFp8, bool kWithLse, typename OutT>
absl::Status LaunchDecode(const uint16_t* q_abs, const void* kv_cache, const int32_t* block_table,
                          const int32_t* query_seq, const int32_t* seq_lens,
                          const MlaDecodeParams& p, int splits, float* o_part, float* lse_part,
                          OutT* out, cudaStream_t stream) {
  if (MlaDecodeUsesWgmma(p)) {
    const internal::MlaWgmmaLaunch launch{.q_abs = q_abs,
                                          .kv_cache = kv_cache,
                                          .block_table = block_table,
                                          .query_seq = query_seq,
                                          .seq_lens = seq_lens,
                                          .batch = p.batch,
                                          .num_heads = p.num_heads,
                                          .max_blocks_per_seq = p.max_blocks_per_seq,
                                          .pages_per_split = PagesPerSplit(p, splits),
                                          .num_splits = splits,
                                          .scale = p.scale,
                                          .o_part = o_part,
                                          .lse_part = lse_part};
    RETURN_IF_ERROR(internal::LaunchMlaDecodeWgmma(launch, kFp8, stream));
  } else {
    RETURN_IF_ERROR(LaunchMmaSync<kFp8>(q_abs, kv_cache, block_table, query_seq, seq_lens, p,
                                        splits, o_part, lse_part, stream));
  }
  internal::LaunchKernel(MlaCombineKernel<OutT, kWithLse>, dim3(p.num_heads, p.batch),
                         kMlaValueDim / 4, 0, stream, o_part, lse_part, p.num_heads, splits, out,
                         kWithLse ? kMlaValueDim + 1 : kMlaValueDim);
  return LaunchStatus("MlaCombineKernel launch");
}

// kWithLse: rows [ō ; lse] of 513 f32 (MlaPagedPartial); else rows ō of 512.
template <bool kWithLse = false, typename OutT>
absl::Status Decode(const uint16_t* q_abs, const void* kv_cache, const int32_t* block_table,
                    const int32_t* query_seq, const int32_t* seq_lens, const MlaDecodeParams& p,
                    void* workspace, int64_t workspace_bytes, OutT* out, cudaStream_t stream) {
  absl::Status status = CheckParams(p, workspace, workspace_bytes);
  if (!status.ok()) return status;
  if (p.batch == 0) return absl::OkStatus();
  const int splits = MlaDecodeNumSplits(p);
  float* o_part = static_cast<float*>(workspace);
  float* lse_part = o_part + static_cast<int64_t>(p.batch) * splits * p.num_heads * kMlaValueDim;
  if (p.cache_dtype == LatentDType::kFP8) {
    return LaunchDecode<true, kWithLse>(q_abs, kv_cache, block_table, query_seq, seq_lens, p,
                                        splits, o_part, lse_part, out, stream);
  }
  return LaunchDecode<false, kWithLse>(q_abs, kv_cache, block_table, query_seq, seq_lens, p, splits,
                                       o_part, lse_part, out, stream);
}

}  // namespace

bool MlaDecodeUsesWgmma(const MlaDecodeParams& p) {
  switch (p.kernel) {
    case MlaDecodeKernel::kMmaSync:
      return false;
    case MlaDecodeKernel::kWgmma:
      return true;
    case MlaDecodeKernel::kAuto:
      break;
  }
  return WgmmaChosen();
}

int MlaDecodeNumSplits(const MlaDecodeParams& p) {
  if (p.num_splits > 0) return p.num_splits;
  const int max_pages = MaxPages(p);
  const int heads_per_cta = HeadsPerCta(p);
  const int64_t ctas = static_cast<int64_t>(std::max(p.batch, 1)) *
                       ((std::max(p.num_heads, 1) + heads_per_cta - 1) / heads_per_cta);
  const int sms = internal::NumSms();
  // Time model: waves × pages per CTA, plus ~2 pages' worth of fixed cost per CTA (Q load,
  // epilogue) and a small charge per split for the merge. Smallest split count wins ties.
  int best = 1;
  double best_cost = 1e300;
  for (int s = 1; s <= std::min(max_pages, 128); ++s) {
    const int pps = (max_pages + s - 1) / s;
    const int64_t waves = (ctas * s + sms - 1) / sms;
    const double cost = static_cast<double>(waves) * (pps + 2) + 0.05 * s;
    if (cost < best_cost) {
      best_cost = cost;
      best = s;
    }
  }
  return best;
}

int64_t MlaDecodeWorkspaceBytes(const MlaDecodeParams& p) {
  const int64_t rows =
      static_cast<int64_t>(std::max(p.batch, 0)) * MlaDecodeNumSplits(p) * std::max(p.num_heads, 0);
  return rows * (kMlaValueDim + 1) * static_cast<int64_t>(sizeof(float));
}

absl::Status MlaPagedDecode(const uint16_t* q_abs, const void* kv_cache, const int32_t* block_table,
                            const int32_t* seq_lens, const MlaDecodeParams& params, void* workspace,
                            int64_t workspace_bytes, float* out, cudaStream_t stream) {
  return Decode(q_abs, kv_cache, block_table, nullptr, seq_lens, params, workspace, workspace_bytes,
                out, stream);
}

absl::Status MlaPagedDecode(const uint16_t* q_abs, const void* kv_cache, const int32_t* block_table,
                            const int32_t* seq_lens, const MlaDecodeParams& params, void* workspace,
                            int64_t workspace_bytes, uint16_t* out, cudaStream_t stream) {
  return Decode(q_abs, kv_cache, block_table, nullptr, seq_lens, params, workspace, workspace_bytes,
                out, stream);
}

absl::Status MlaPagedPrefill(const uint16_t* q_abs, const void* kv_cache,
                             const int32_t* block_table, const int32_t* query_seq,
                             const int32_t* seq_lens, const MlaDecodeParams& params,
                             void* workspace, int64_t workspace_bytes, uint16_t* out,
                             cudaStream_t stream) {
  if (query_seq == nullptr) return absl::InvalidArgumentError("MlaPagedPrefill: null query_seq");
  return Decode(q_abs, kv_cache, block_table, query_seq, seq_lens, params, workspace,
                workspace_bytes, out, stream);
}

absl::Status MlaPagedPartial(const uint16_t* q_abs, const void* kv_cache,
                             const int32_t* block_table, const int32_t* query_seq,
                             const int32_t* seq_lens, const MlaDecodeParams& params,
                             void* workspace, int64_t workspace_bytes, float* partial,
                             cudaStream_t stream) {
  return Decode<true>(q_abs, kv_cache, block_table, query_seq, seq_lens, params, workspace,
                      workspace_bytes, partial, stream);
}

absl::Status MlaMergePartials(const float* partials, int parts, int64_t num_items, uint16_t* out,
                              cudaStream_t stream) {
  if (parts < 1 || num_items < 0 || num_items > int64_t{0x7fffffff}) {
    return absl::InvalidArgumentError("MlaMergePartials: parts must be ≥ 1, items in [0, 2^31)");
  }
  if (num_items == 0) return absl::OkStatus();
  internal::LaunchKernel(MlaMergePartialsKernel, dim3(static_cast<unsigned>(num_items)),
                         kMlaValueDim / 4, 0, stream, partials, parts, num_items, out);
  return LaunchStatus("MlaMergePartialsKernel launch");
}

absl::Status MlaPagedDecodeSimple(const uint16_t* q_abs, const void* kv_cache,
                                  const int32_t* block_table, const int32_t* seq_lens,
                                  const MlaDecodeParams& p, float* out, cudaStream_t stream) {
  if (p.batch < 0 || p.num_heads <= 0 || p.max_blocks_per_seq <= 0) {
    return absl::InvalidArgumentError("MlaPagedDecodeSimple: bad params");
  }
  RETURN_IF_ERROR(CheckCacheDType(p));
  if (p.batch == 0) return absl::OkStatus();
  const dim3 grid(p.num_heads, p.batch);
  if (p.cache_dtype == LatentDType::kFP8) {
    internal::LaunchKernel(MlaDecodeSimpleKernel<true>, grid, 256, 0, stream, q_abs, kv_cache,
                           block_table, seq_lens, p.num_heads, p.max_blocks_per_seq,
                           p.scale * kLog2e, out);
  } else {
    internal::LaunchKernel(MlaDecodeSimpleKernel<false>, grid, 256, 0, stream, q_abs, kv_cache,
                           block_table, seq_lens, p.num_heads, p.max_blocks_per_seq,
                           p.scale * kLog2e, out);
  }
  return LaunchStatus("MlaDecodeSimpleKernel launch");
}

absl::Status MlaAbsorbQuery(cublasHandle_t handle, const uint16_t* q, int batch,
                            const uint16_t* w_kvb, const MlaHeadDims& d, uint16_t* q_abs,
                            cudaStream_t stream) {
  if (batch < 0 || d.num_heads <= 0 || d.qk_nope_head_dim <= 0 || d.v_head_dim <= 0) {
    return absl::InvalidArgumentError("MlaAbsorbQuery: bad dims");
  }
  if (batch == 0) return absl::OkStatus();
  const int dn = d.qk_nope_head_dim, dv = d.v_head_dim, h = d.num_heads;
  const int r = kMlaValueDim;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, stream), "MlaAbsorbQuery cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  // Per head, column-major: q_absᵀ[r, B] = W_UK,hᵀ[r, dn] · q_nopeᵀ[dn, B].
  STRATA_CUBLAS_RETURN_IF_ERROR(
      cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, r, batch, dn, &alpha, w_kvb,
                                 CUDA_R_16BF, r, static_cast<int64_t>(dn + dv) * r, q, CUDA_R_16BF,
                                 h * (dn + kMlaRopeDim), dn + kMlaRopeDim, &beta, q_abs,
                                 CUDA_R_16BF, h * kMlaLatentDim, kMlaLatentDim, h,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "MlaAbsorbQuery cublasGemmStridedBatchedEx");
  internal::LaunchKernel(CopyRopeKernel, dim3(h, batch), kMlaRopeDim, 0, stream, q, h, dn, q_abs);
  return LaunchStatus("MlaAbsorbQuery CopyRopeKernel launch");
}

absl::Status MlaApplyValueProjection(cublasHandle_t handle, const uint16_t* o_lat, int batch,
                                     const uint16_t* w_kvb, const MlaHeadDims& d, float* o,
                                     cudaStream_t stream) {
  if (batch < 0 || d.num_heads <= 0 || d.qk_nope_head_dim <= 0 || d.v_head_dim <= 0) {
    return absl::InvalidArgumentError("MlaApplyValueProjection: bad dims");
  }
  if (batch == 0) return absl::OkStatus();
  const int dn = d.qk_nope_head_dim, dv = d.v_head_dim, h = d.num_heads;
  const int r = kMlaValueDim;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, stream),
                                "MlaApplyValueProjection cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  // Per head, column-major: oᵀ[dv, B] = W_UV,h[dv, r] · ōᵀ[r, B].
  STRATA_CUBLAS_RETURN_IF_ERROR(
      cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, dv, batch, r, &alpha,
                                 w_kvb + static_cast<int64_t>(dn) * r, CUDA_R_16BF, r,
                                 static_cast<int64_t>(dn + dv) * r, o_lat, CUDA_R_16BF,
                                 h * kMlaValueDim, kMlaValueDim, &beta, o, CUDA_R_32F, h * dv, dv,
                                 h, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "MlaApplyValueProjection cublasGemmStridedBatchedEx");
  return absl::OkStatus();
}

}  // namespace strata::kernels::cuda
