#include "kernels/cuda/mla_prefill.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/latent_fp8.cuh"
#include "kernels/cuda/internal/launch.cuh"
#include "kernels/cuda/internal/mma.cuh"
#include "kernels/cuda/mla_decode.h"

namespace strata::kernels::cuda {
namespace {

using internal::Bf16BitsToFloat;
using internal::CpAsync16;
using internal::CpAsyncCommit;
using internal::CpAsyncWait;
using internal::FloatToBf16Bits;
using internal::LdMatrixX4;
using internal::LdMatrixX4Trans;
using internal::MmaBf16;
using internal::SigmoidF;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kLatentRank = kMlaValueDim;  // r = 512: the c part of a latent row
constexpr int kBlockM = 64;                // queries per CTA (4 warps × 16 rows)
constexpr int kBlockN = 64;                // keys per shared-memory tile
constexpr int kThreads = 128;
constexpr int kQkSteps = kMlaQkHeadDim / 16;  // 12 k16 steps of Q·Kᵀ
// Shared rows padded by 16 bytes: pitches of 400 B and 272 B are ≡ 4 words mod 32, so the 8 row
// addresses of an ldmatrix fall in distinct banks.
constexpr int kQkStride = kMlaQkHeadDim + 8;  // bf16 elements (Q and K tiles)
constexpr int kVStride = kMlaVHeadDim + 8;    // bf16 elements
constexpr int kQkChunks = kMlaQkHeadDim / 8;  // 16-byte chunks per Q/K row: 16 nope + 8 rope
constexpr int kNopeChunks = kMlaQkNopeDim / 8;
constexpr int kVChunks = kMlaVHeadDim / 8;
constexpr int kQTileElems = kBlockM * kQkStride;
constexpr int kKTileElems = kBlockN * kQkStride;
constexpr int kVTileElems = kBlockN * kVStride;
constexpr int kSmemBytes = 2 * (kQTileElems + 2 * kKTileElems + 2 * kVTileElems);  // 111616
static_assert(kQTileElems % 8 == 0 && kKTileElems % 8 == 0 && kVTileElems % 8 == 0,
              "shared tiles must stay 16-byte aligned");
static_assert(2 * (kSmemBytes + 1024) <= 228 * 1024, "two CTAs per SM must fit");
static_assert(kMlaQkHeadDim == kMlaQkNopeDim + kMlaRopeDim, "q head = [nope ; rope]");

// ---------------------------------------------------------------------------------------------
// Stage 1: gather.

// 16-byte chunk `chunk` of the bf16 row `row_index` of the cache: copied from a bf16 cache,
// dequantized from an fp8 one (internal/latent_fp8.cuh: 72 chunks per row either way).
template <bool kFp8>
__device__ __forceinline__ uint4 LatentChunk(const void* kv_cache, int64_t row_index, int chunk) {
  if constexpr (kFp8) {
    return internal::Fp8RowChunkToBf16(
        static_cast<const uint8_t*>(kv_cache) + row_index * internal::kFp8RowBytes, chunk);
  } else {
    return reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(kv_cache) +
                                          row_index * kMlaLatentDim)[chunk];
  }
}

// Grid (pages, num_seqs), 256 threads: copies the valid rows of page p of sequence b to rows
// cu_seqlens_k[b] + 64p + i of `latent` [total_context, 576] (16-byte chunks; a negative block
// id yields zero rows).
template <bool kFp8>
__global__ void __launch_bounds__(256)
    GatherLatentKernel(const void* __restrict__ kv_cache, const int32_t* __restrict__ block_table,
                       const int32_t* __restrict__ cu_seqlens_k, int max_blocks_per_seq,
                       uint16_t* __restrict__ latent) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int p = blockIdx.x, b = blockIdx.y;
  const int64_t k_start = cu_seqlens_k[b];
  const int ctx = cu_seqlens_k[b + 1] - cu_seqlens_k[b];
  const int rows = min(kMlaPageSize, ctx - p * kMlaPageSize);
  if (rows <= 0) return;
  const int32_t block = block_table[static_cast<int64_t>(b) * max_blocks_per_seq + p];
  uint4* dst = reinterpret_cast<uint4*>(latent + (k_start + p * kMlaPageSize) * kMlaLatentDim);
  const int n = rows * (kMlaLatentDim / 8);
  if (block < 0) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = make_uint4(0u, 0u, 0u, 0u);
    return;
  }
  const int64_t row0 = static_cast<int64_t>(block) * kMlaPageSize;
  constexpr int kChunks = kMlaLatentDim / 8;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    dst[i] = LatentChunk<kFp8>(kv_cache, row0 + i / kChunks, i % kChunks);
  }
}

// Grid (⌈rows / 8⌉), 256 threads: warp w of CTA x copies row win_begin + 8x + w of the
// concatenated context (its sequence found by binary search of cu_seqlens_k) from its page to
// row 8x + w of `latent` [rows, 576] (a negative block id yields a zero row).
template <bool kFp8>
__global__ void __launch_bounds__(256)
    GatherLatentWindowKernel(const void* __restrict__ kv_cache,
                             const int32_t* __restrict__ block_table,
                             const int32_t* __restrict__ cu_seqlens_k, int num_seqs,
                             int max_blocks_per_seq, int64_t win_begin, int rows,
                             uint16_t* __restrict__ latent) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int j = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (j >= rows) return;
  const int64_t r = win_begin + j;
  int lo = 0, hi = num_seqs;  // invariant: cu_seqlens_k[lo] ≤ r < cu_seqlens_k[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (cu_seqlens_k[mid] <= r) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int pos = static_cast<int>(r - cu_seqlens_k[lo]);
  const int32_t block =
      block_table[static_cast<int64_t>(lo) * max_blocks_per_seq + pos / kMlaPageSize];
  uint4* dst = reinterpret_cast<uint4*>(latent + static_cast<int64_t>(j) * kMlaLatentDim);
  constexpr int kChunks = kMlaLatentDim / 8;
  if (block < 0) {
    for (int i = lane; i < kChunks; i += 32) dst[i] = make_uint4(0u, 0u, 0u, 0u);
    return;
  }
  const int64_t row = static_cast<int64_t>(block) * kMlaPageSize + pos % kMlaPageSize;
  for (int i = lane; i < kChunks; i += 32) dst[i] = LatentChunk<kFp8>(kv_cache, row, i);
}

// ---------------------------------------------------------------------------------------------
// Stage 2: flash attention.

// Starts the cp.async copies of keys [n0, n0 + 64) of one (sequence, head), key k at scratch row
// k_start + k: K rows [k_nope (from kv) ; k_pe (from latent)] and V rows; keys ≥ kv_end are
// zero-filled.
__device__ __forceinline__ void LoadKvTile(uint16_t* k_dst, uint16_t* v_dst, const uint16_t* latent,
                                           const uint16_t* kv, int64_t k_start, int n0, int kv_end,
                                           int head, int64_t kv_row_stride) {
  const int rows = min(kBlockN, kv_end - n0);
  for (int c = threadIdx.x; c < kBlockN * kQkChunks; c += kThreads) {
    const int row = c / kQkChunks, chunk = c % kQkChunks;
    const int64_t key = k_start + n0 + row;
    const uint16_t* src =
        chunk < kNopeChunks
            ? kv + key * kv_row_stride + head * kMlaKvbRowsPerHead + chunk * 8
            : latent + key * kMlaLatentDim + kLatentRank + (chunk - kNopeChunks) * 8;
    const bool valid = row < rows;
    CpAsync16(k_dst + row * kQkStride + chunk * 8, valid ? src : latent, valid);
  }
  for (int c = threadIdx.x; c < kBlockN * kVChunks; c += kThreads) {
    const int row = c / kVChunks, chunk = c % kVChunks;
    const int64_t key = k_start + n0 + row;
    const uint16_t* src =
        kv + key * kv_row_stride + head * kMlaKvbRowsPerHead + kMlaQkNopeDim + chunk * 8;
    const bool valid = row < rows;
    CpAsync16(v_dst + row * kVStride + chunk * 8, valid ? src : kv, valid);
  }
}

__device__ __forceinline__ uint32_t PackBf16(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

__device__ __forceinline__ void Store2(float* dst, float a, float b) {
  *reinterpret_cast<float2*>(dst) = make_float2(a, b);
}
__device__ __forceinline__ void Store2(uint16_t* dst, float a, float b) {
  *reinterpret_cast<uint32_t*>(dst) = PackBf16(FloatToBf16Bits(a), FloatToBf16Bits(b));
}

__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// One warp's online-softmax step on its S[16, 64] tile (log2 domain, already scaled/masked):
// updates the running maxima m, rescales l and O by α = 2^(m_old − m_new), and returns P rounded
// to bf16 as the four A fragments of P·V (C layout of two adjacent n8 tiles = A layout of k16).
// l accumulates this thread's share of the rounded P (quad-reduced at the end).
// kMayBeEmpty (context windows): a row whose causal limit precedes the window sees no key in any
// tile (m stays −∞); the exponentials then use 0 as the reference, so P = 0, α = 0 and l = 0
// (which MergePartial skips) instead of NaN.
template <bool kMayBeEmpty>
__device__ __forceinline__ void SoftmaxStep(float (&s)[8][4], float (&m)[2], float (&l)[2],
                                            float (&acc)[16][4], uint32_t (&pf)[4][4]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
    mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
  }
  float alpha[2], ref[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // Without kMayBeEmpty finite: key 0 is visible to every row and tile 0 comes first.
    const float m_new = fmaxf(m[r], QuadMax(mx[r]));
    ref[r] = m_new;
    if constexpr (kMayBeEmpty) ref[r] = m_new == -INFINITY ? 0.0f : m_new;
    alpha[r] = exp2f(m[r] - ref[r]);  // 0 on the first tile (m = −∞)
    m[r] = m_new;
    l[r] *= alpha[r];
  }
#pragma unroll
  for (int n = 0; n < 16; ++n) {
    acc[n][0] *= alpha[0];
    acc[n][1] *= alpha[0];
    acc[n][2] *= alpha[1];
    acc[n][3] *= alpha[1];
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint16_t p0 = FloatToBf16Bits(exp2f(s[j][0] - ref[0]));
    const uint16_t p1 = FloatToBf16Bits(exp2f(s[j][1] - ref[0]));
    const uint16_t p2 = FloatToBf16Bits(exp2f(s[j][2] - ref[1]));
    const uint16_t p3 = FloatToBf16Bits(exp2f(s[j][3] - ref[1]));
    l[0] += Bf16BitsToFloat(p0) + Bf16BitsToFloat(p1);
    l[1] += Bf16BitsToFloat(p2) + Bf16BitsToFloat(p3);
    pf[j >> 1][(j & 1) * 2 + 0] = PackBf16(p0, p1);  // row g:     keys c, c+1 (+8 if j odd)
    pf[j >> 1][(j & 1) * 2 + 1] = PackBf16(p2, p3);  // row g + 8
  }
}

// Epilogue: o = O / l, gated, for rows i0 and i0 + 8 of the CTA's sequence (this thread's share
// of l, O in the thread layout of the P·V accumulators); rows past new_len are not stored.
template <typename OutT>
__device__ __forceinline__ void StoreNormalised(const float (&l)[2], const float (&acc)[16][4],
                                                int i0, int new_len, int q_start, int head,
                                                int num_heads, const float* __restrict__ gate,
                                                OutT* __restrict__ out) {
  const int c2 = 2 * (threadIdx.x & 3);
  const int64_t out_stride = static_cast<int64_t>(num_heads) * kMlaVHeadDim;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = i0 + 8 * r;
    const float inv = 1.0f / QuadSum(l[r]);  // every lane joins the shuffle
    if (i >= new_len) continue;
    const int64_t row = q_start + i;
    OutT* dst = out + row * out_stride + head * kMlaVHeadDim;
    const float* g_row = gate != nullptr ? gate + row * out_stride + head * kMlaVHeadDim : nullptr;
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const int col = n * 8 + c2;
      float v0 = acc[n][2 * r] * inv, v1 = acc[n][2 * r + 1] * inv;
      if (g_row != nullptr) {
        const float2 gv = *reinterpret_cast<const float2*>(g_row + col);
        v0 *= SigmoidF(gv.x);
        v1 *= SigmoidF(gv.y);
      }
      Store2(dst + col, v0, v1);
    }
  }
}

// Windowed epilogue: merges this warp's partial of rows i0 and i0 + 8 of the CTA's sequence
// (running max m, this thread's share of l, O [16 × 8 dims, thread layout of the P·V accumulators])
// into O_acc [T, H, 128] f32 and ml [T, H] (m, l) by the log-sum-exp rule. Rows past new_len and
// rows that saw no key (l = 0) leave the accumulators alone. Each (row, head) belongs to one CTA
// per launch, and launches are ordered on the stream, so the read-modify-write needs no atomics.
__device__ __forceinline__ void MergePartial(const float (&m)[2], const float (&l)[2],
                                             const float (&acc)[16][4], int i0, int new_len,
                                             int q_start, int head, int num_heads,
                                             float* __restrict__ ml, float* __restrict__ o_acc) {
  const int c2 = 2 * (threadIdx.x & 3);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = i0 + 8 * r;
    const float l_part = QuadSum(l[r]);  // every lane joins the shuffle
    const bool merge = i < new_len && l_part > 0.0f;
    const int64_t rh = static_cast<int64_t>(q_start + i) * num_heads + head;
    float2 old = make_float2(0.0f, 0.0f);
    if (merge) old = *reinterpret_cast<const float2*>(ml + 2 * rh);
    __syncwarp();  // the quad's lanes have read (m, l) before lane 0 rewrites it
    if (!merge) continue;
    float m_new = m[r], a_old = 0.0f, a_new = 1.0f;
    if (old.y > 0.0f) {
      m_new = fmaxf(old.x, m[r]);
      a_old = exp2f(old.x - m_new);
      a_new = exp2f(m[r] - m_new);
    }
    float* dst = o_acc + rh * kMlaVHeadDim;
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const int col = n * 8 + c2;
      const float2 o = *reinterpret_cast<const float2*>(dst + col);
      Store2(dst + col, o.x * a_old + acc[n][2 * r] * a_new,
             o.y * a_old + acc[n][2 * r + 1] * a_new);
    }
    if (c2 == 0) {
      *reinterpret_cast<float2*>(ml + 2 * rh) = make_float2(m_new, old.y * a_old + l_part * a_new);
    }
  }
}

// Grid (query tiles, H, num_seqs), 128 threads, 2 CTAs/SM. Query tiles run last-first (the
// longest causal rows start first). See mla_prefill.h for the contract.
// kWindow = false: the scratch holds the whole concatenated context; o = σ(g)·O/l → out.
// kWindow = true: the scratch holds rows [win_begin, win_end) of the concatenated context only
// (row win_begin first); the CTA attends to the keys of its sequence inside the window and
// merges its unnormalised partial (O, running max m in the log2 domain, l) into the f32
// accumulators out = O_acc [T, H, 128] and ml = [T, H] (m, l) pairs by the log-sum-exp rule
// (l = 0 marks an empty accumulator; a row that sees no key of the window changes nothing);
// gate is unused (MlaPrefillFinalizeKernel applies it).
template <typename OutT, bool kWindow>
__global__ void __launch_bounds__(kThreads, 2)
    MlaPrefillAttnKernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ latent,
                         const uint16_t* __restrict__ kv, const int32_t* __restrict__ cu_seqlens_q,
                         const int32_t* __restrict__ cu_seqlens_k, const float* __restrict__ gate,
                         int num_heads, float scale_log2, int64_t win_begin, int64_t win_end,
                         float* __restrict__ ml, OutT* __restrict__ out) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  STRATA_DYNAMIC_SHARED(smem);
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem);
  uint16_t* k_s = q_s + kQTileElems;      // two K tiles
  uint16_t* v_s = k_s + 2 * kKTileElems;  // two V tiles

  const int b = blockIdx.z, head = blockIdx.y;
  const int m0 = (gridDim.x - 1 - blockIdx.x) * kBlockM;
  const int q_start = cu_seqlens_q[b];
  const int new_len = cu_seqlens_q[b + 1] - q_start;
  const int64_t k_start = cu_seqlens_k[b];
  const int ctx = cu_seqlens_k[b + 1] - cu_seqlens_k[b];
  if (m0 >= new_len || ctx < new_len) return;
  const int num_computed = ctx - new_len;
  const int kv_end = num_computed + min(m0 + kBlockM, new_len);  // keys [0, kv_end) are needed
  // This launch covers keys [key_lo, key_hi) of the sequence; key k sits at scratch row k_base + k.
  int key_lo = 0, key_hi = kv_end;
  int64_t k_base = k_start;
  if constexpr (kWindow) {
    const int64_t lo = win_begin > k_start ? win_begin - k_start : 0;
    const int64_t hi = win_end - k_start < kv_end ? win_end - k_start : kv_end;
    if (lo >= hi) return;  // no needed key of this sequence in the window
    key_lo = static_cast<int>(lo);
    key_hi = static_cast<int>(hi);
    k_base = k_start - win_begin;
  }
  const int num_tiles = (key_hi - key_lo + kBlockN - 1) / kBlockN;
  const int64_t kv_row_stride = static_cast<int64_t>(num_heads) * kMlaKvbRowsPerHead;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Q tile (zero rows past the sequence's new tokens) and key tile 0: one cp.async group.
  const int q_rows = min(kBlockM, new_len - m0);
  for (int c = tid; c < kBlockM * kQkChunks; c += kThreads) {
    const int row = c / kQkChunks, col = (c % kQkChunks) * 8;
    const uint16_t* src =
        q + (static_cast<int64_t>(q_start + m0 + row) * num_heads + head) * kMlaQkHeadDim + col;
    const bool valid = row < q_rows;
    CpAsync16(q_s + row * kQkStride + col, valid ? src : q, valid);
  }
  LoadKvTile(k_s, v_s, latent, kv, k_base, key_lo, key_hi, head, kv_row_stride);
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  uint32_t qf[kQkSteps][4];
  {
    const uint16_t* a_row = q_s + (warp * 16 + (lane & 15)) * kQkStride + (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < kQkSteps; ++kk) LdMatrixX4(qf[kk], a_row + kk * 16);
  }

  const int g = lane >> 2, c2 = 2 * (lane & 3);
  // Last visible key of this thread's two rows (query m0 + 16·warp + g and + 8): the causal
  // limit, clamped to the last key of the range (rows past the new tokens are computed, never
  // stored). Tiles that start past mask_from need no mask.
  int pos[2];
  pos[0] = min(num_computed + m0 + warp * 16 + g, key_hi - 1);
  pos[1] = min(num_computed + m0 + warp * 16 + g + 8, key_hi - 1);
  // No row of the CTA sees a key at or beyond num_computed + m0 + 1 unmasked, nor one ≥ key_hi.
  const int mask_from = min(num_computed + m0 + 1, key_hi);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float acc[16][4];
#pragma unroll
  for (int n = 0; n < 16; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  for (int t = 0; t < num_tiles; ++t) {
    const int n0 = key_lo + t * kBlockN;
    if (t + 1 < num_tiles) {
      const int nb = (t + 1) & 1;
      LoadKvTile(k_s + nb * kKTileElems, v_s + nb * kVTileElems, latent, kv, k_base, n0 + kBlockN,
                 key_hi, head, kv_row_stride);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const uint16_t* k_cur = k_s + (t & 1) * kKTileElems;
    const uint16_t* v_cur = v_s + (t & 1) * kVTileElems;

    // S[16 rows, 64 keys] = Q · Kᵀ over 192 dims.
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    const uint16_t* b_row =
        k_cur + ((lane & 7) + ((lane >> 4) << 3)) * kQkStride + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < kQkSteps; ++kk) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bk[4];
        LdMatrixX4(bk, b_row + np * 16 * kQkStride + kk * 16);
        MmaBf16(s[2 * np], qf[kk], bk[0], bk[1]);
        MmaBf16(s[2 * np + 1], qf[kk], bk[2], bk[3]);
      }
    }
    const bool need_mask = n0 + kBlockN > mask_from;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n0 + j * 8 + c2 + (e & 1);
        s[j][e] = need_mask && key > pos[e >> 1] ? -INFINITY : s[j][e] * scale_log2;
      }
    }

    uint32_t pf[4][4];
    SoftmaxStep<kWindow>(s, m, l, acc, pf);

    // O[16 rows, 128 dims] += P[16, 64] · V[64, 128].
    const uint16_t* v_row =
        v_cur + ((lane & 7) + (((lane >> 3) & 1) << 3)) * kVStride + (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        uint32_t bv[4];
        LdMatrixX4Trans(bv, v_row + kk * 16 * kVStride + np * 16);
        MmaBf16(acc[2 * np], pf[kk], bv[0], bv[1]);
        MmaBf16(acc[2 * np + 1], pf[kk], bv[2], bv[3]);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this tile's buffers
  }

  if constexpr (kWindow) {
    MergePartial(m, l, acc, m0 + warp * 16 + g, new_len, q_start, head, num_heads, ml, out);
  } else {
    StoreNormalised(l, acc, m0 + warp * 16 + g, new_len, q_start, head, num_heads, gate, out);
  }
}

// After the last window: out = O_acc / l, gated, over `pairs` = T·H·64 element pairs (grid-stride);
// rows with l = 0 (a sequence with C_b < new_b) stay unwritten.
template <typename OutT>
__global__ void MlaPrefillFinalizeKernel(const float* __restrict__ o_acc,
                                         const float* __restrict__ ml,
                                         const float* __restrict__ gate, int64_t pairs,
                                         OutT* __restrict__ out) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += stride) {
    const int64_t rh = i / (kMlaVHeadDim / 2);  // row · H + head
    const float l = ml[2 * rh + 1];
    if (l <= 0.0f) continue;
    const float inv = 1.0f / l;
    const int64_t e = 2 * i;  // [T, H, 128] = [T, H·128] row-major
    const float2 o = *reinterpret_cast<const float2*>(o_acc + e);
    float v0 = o.x * inv, v1 = o.y * inv;
    if (gate != nullptr) {
      const float2 gv = *reinterpret_cast<const float2*>(gate + e);
      v0 *= SigmoidF(gv.x);
      v1 *= SigmoidF(gv.y);
    }
    Store2(out + e, v0, v1);
  }
}

// o[i] ← σ(g[i]) · o[i]; grid-stride, 4 elements per step when `vec4`.
__global__ void OutputGateKernel(float* __restrict__ o, const float* __restrict__ gate, int64_t n,
                                 bool vec4) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec4) {
    float4* o4 = reinterpret_cast<float4*>(o);
    const float4* g4 = reinterpret_cast<const float4*>(gate);
    for (; i < n / 4; i += stride) {
      float4 v = o4[i];
      const float4 gv = g4[i];
      v.x *= SigmoidF(gv.x);
      v.y *= SigmoidF(gv.y);
      v.z *= SigmoidF(gv.z);
      v.w *= SigmoidF(gv.w);
      o4[i] = v;
    }
    return;
  }
  for (; i < n; i += stride) o[i] *= SigmoidF(gate[i]);
}

// ---------------------------------------------------------------------------------------------
// Host side.

constexpr int64_t kAlign = 256;
int64_t AlignUp(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// True when MlaPrefillMha walks the concatenated context in windows of max_context_chunk rows.
bool Chunked(const MlaPrefillParams& p) {
  return p.max_context_chunk > 0 && p.max_context_chunk < p.total_context;
}

// Rows of the dense expansion: the whole context, or one window.
int64_t ExpandRows(const MlaPrefillParams& p) {
  return std::max<int64_t>(Chunked(p) ? p.max_context_chunk : p.total_context, 0);
}

// Workspace = latent [rows, 576] bf16 | KV [rows, H·256] bf16 | chunked only: O_acc [T, H, 128]
// f32 | ml [T, H, 2] f32; each part padded to 256 B.
int64_t LatentBytes(const MlaPrefillParams& p) {
  return AlignUp(ExpandRows(p) * kMlaLatentDim * 2);
}
int64_t ExpandedBytes(const MlaPrefillParams& p) {
  return AlignUp(ExpandRows(p) * std::max(p.num_heads, 0) * kMlaKvbRowsPerHead * 2);
}
int64_t AccumulatorRows(const MlaPrefillParams& p) {
  return Chunked(p) ? std::max<int64_t>(p.total_new, 0) * std::max(p.num_heads, 0) : 0;
}
int64_t OAccBytes(const MlaPrefillParams& p) {
  return AlignUp(AccumulatorRows(p) * kMlaVHeadDim * 4);
}
int64_t MlBytes(const MlaPrefillParams& p) { return AlignUp(AccumulatorRows(p) * 2 * 4); }

bool Aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

absl::Status Invalid(const char* what, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
}

absl::Status CheckParams(const MlaPrefillParams& p, const void* workspace, int64_t ws_bytes,
                         const char* what) {
  if (p.num_seqs < 0 || p.num_seqs > 65535) {
    return Invalid(what, absl::StrCat("num_seqs ", p.num_seqs, " outside [0, 65535]"));
  }
  if (p.num_heads <= 0 || p.num_heads > 65535) {
    return Invalid(what, absl::StrCat("num_heads ", p.num_heads, " outside [1, 65535]"));
  }
  if (p.max_blocks_per_seq <= 0) {
    return Invalid(what, absl::StrCat("max_blocks_per_seq ", p.max_blocks_per_seq, " < 1"));
  }
  if (p.cache_dtype != LatentDType::kBF16 && p.cache_dtype != LatentDType::kFP8) {
    return Invalid(what, "the cache must hold bf16 or fp8 rows");
  }
  if (p.max_context < 0 ||
      p.max_context > static_cast<int64_t>(p.max_blocks_per_seq) * kMlaPageSize) {
    return Invalid(
        what, absl::StrCat("max_context ", p.max_context, " outside [0, max_blocks_per_seq · 64 = ",
                           static_cast<int64_t>(p.max_blocks_per_seq) * kMlaPageSize, "]"));
  }
  if (p.max_new < 0 || p.max_new > p.max_context) {
    return Invalid(what, absl::StrCat("max_new ", p.max_new,
                                      " outside [0, max_context = ", p.max_context, "]"));
  }
  if (p.total_context < 0 || p.total_context > static_cast<int64_t>(p.num_seqs) * p.max_context ||
      p.total_context > std::numeric_limits<int32_t>::max()) {
    return Invalid(what, absl::StrCat("total_context ", p.total_context,
                                      " outside [0, min(num_seqs · max_context, INT32_MAX)]"));
  }
  if (p.total_new < 0 || p.total_new > p.total_context ||
      p.total_new > static_cast<int64_t>(p.num_seqs) * p.max_new) {
    return Invalid(what, absl::StrCat("total_new ", p.total_new,
                                      " outside [0, min(total_context, num_seqs · max_new)]"));
  }
  if (!std::isfinite(p.scale)) return Invalid(what, "scale is not finite");
  if (p.max_context_chunk < 0) {
    return Invalid(what, absl::StrCat("max_context_chunk ", p.max_context_chunk, " < 0"));
  }
  const int64_t need = MlaPrefillWorkspaceBytes(p);
  if (ws_bytes < need) {
    return Invalid(what, absl::StrCat("workspace ", ws_bytes, " bytes < ", need,
                                      " (MlaPrefillWorkspaceBytes)"));
  }
  if (need > 0 && (workspace == nullptr || !Aligned(workspace, 16))) {
    return Invalid(what, "workspace null or not 16-byte aligned");
  }
  return absl::OkStatus();
}

// The stages alone cover the whole context; windows exist only inside MlaPrefillMha.
absl::Status CheckUnchunked(const MlaPrefillParams& p, const char* what) {
  if (!Chunked(p)) return absl::OkStatus();
  return Invalid(what,
                 absl::StrCat("max_context_chunk ", p.max_context_chunk, " < total_context ",
                              p.total_context, ": a chunked prefill runs only in MlaPrefillMha"));
}

template <typename OutT>
absl::Status Attention(const uint16_t* q, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                       const float* gate, const MlaPrefillParams& p, const void* workspace,
                       int64_t workspace_bytes, OutT* out, cudaStream_t stream) {
  constexpr const char* kWhat = "MlaPrefillAttention";
  RETURN_IF_ERROR(CheckParams(p, workspace, workspace_bytes, kWhat));
  RETURN_IF_ERROR(CheckUnchunked(p, kWhat));
  if (p.num_seqs == 0 || p.max_new == 0 || p.total_new == 0) return absl::OkStatus();
  if (q == nullptr || cu_seqlens_q == nullptr || cu_seqlens_k == nullptr || out == nullptr) {
    return Invalid(kWhat, "null q, cu_seqlens or out");
  }
  if (!Aligned(q, 16) || !Aligned(out, 2 * sizeof(OutT)) ||
      (gate != nullptr && !Aligned(gate, 8))) {
    return Invalid(kWhat, "q must be 16-byte, out 2-element and gate 8-byte aligned");
  }
  const int q_tiles = (p.max_new + kBlockM - 1) / kBlockM;
  const auto* base = static_cast<const unsigned char*>(workspace);
  const auto* latent = reinterpret_cast<const uint16_t*>(base);
  const auto* kv = reinterpret_cast<const uint16_t*>(base + LatentBytes(p));
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(MlaPrefillAttnKernel<OutT, false>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
      "MlaPrefillAttention cudaFuncSetAttribute");
  const dim3 grid(q_tiles, p.num_heads, p.num_seqs);
  internal::LaunchKernel(MlaPrefillAttnKernel<OutT, false>, grid, kThreads, kSmemBytes, stream, q,
                         latent, kv, cu_seqlens_q, cu_seqlens_k, gate, p.num_heads,
                         p.scale * kLog2e, 0, 0, nullptr, out);
  return LaunchStatus("MlaPrefillAttnKernel launch");
}

// One context window [w0, w0 + rows): gather, expand, attend and merge into the accumulators.
absl::Status MhaWindow(cublasHandle_t handle, const uint16_t* q, const void* kv_cache,
                       const int32_t* block_table, const int32_t* cu_seqlens_q,
                       const int32_t* cu_seqlens_k, const uint16_t* w_kvb,
                       const MlaPrefillParams& p, unsigned char* base, int64_t w0, int rows,
                       cudaStream_t stream) {
  auto* latent = reinterpret_cast<uint16_t*>(base);
  auto* kv = reinterpret_cast<uint16_t*>(base + LatentBytes(p));
  auto* o_acc = reinterpret_cast<float*>(base + LatentBytes(p) + ExpandedBytes(p));
  auto* ml = reinterpret_cast<float*>(base + LatentBytes(p) + ExpandedBytes(p) + OAccBytes(p));
  if (p.cache_dtype == LatentDType::kFP8) {
    internal::LaunchKernel(GatherLatentWindowKernel<true>, (rows + 7) / 8, 256, 0, stream, kv_cache,
                           block_table, cu_seqlens_k, p.num_seqs, p.max_blocks_per_seq, w0, rows,
                           latent);
  } else {
    internal::LaunchKernel(GatherLatentWindowKernel<false>, (rows + 7) / 8, 256, 0, stream,
                           kv_cache, block_table, cu_seqlens_k, p.num_seqs, p.max_blocks_per_seq,
                           w0, rows, latent);
  }
  RETURN_IF_ERROR(LaunchStatus("MlaPrefillMha GatherLatentWindowKernel launch"));
  const int64_t n = static_cast<int64_t>(p.num_heads) * kMlaKvbRowsPerHead;
  RETURN_IF_ERROR(
      GemmBf16(handle, latent, rows, kLatentRank, kMlaLatentDim, w_kvb, n, kv, n, stream));
  const dim3 grid((p.max_new + kBlockM - 1) / kBlockM, p.num_heads, p.num_seqs);
  internal::LaunchKernel(MlaPrefillAttnKernel<float, true>, grid, kThreads, kSmemBytes, stream, q,
                         latent, kv, cu_seqlens_q, cu_seqlens_k, nullptr, p.num_heads,
                         p.scale * kLog2e, w0, w0 + rows, ml, o_acc);
  return LaunchStatus("MlaPrefillMha MlaPrefillAttnKernel (window) launch");
}

// MlaPrefillMha with max_context_chunk < total_context: zeroed accumulators, one MhaWindow per
// window of the concatenated context, then MlaPrefillFinalizeKernel (normalise, gate, store).
template <typename OutT>
absl::Status ChunkedMha(cublasHandle_t handle, const uint16_t* q, const void* kv_cache,
                        const int32_t* block_table, const int32_t* cu_seqlens_q,
                        const int32_t* cu_seqlens_k, const uint16_t* w_kvb, const float* gate,
                        const MlaPrefillParams& p, void* workspace, int64_t workspace_bytes,
                        OutT* out, cudaStream_t stream) {
  constexpr const char* kWhat = "MlaPrefillMha";
  RETURN_IF_ERROR(CheckParams(p, workspace, workspace_bytes, kWhat));
  if (p.num_seqs == 0 || p.max_new == 0 || p.total_new == 0) return absl::OkStatus();
  if (handle == nullptr || q == nullptr || kv_cache == nullptr || block_table == nullptr ||
      cu_seqlens_q == nullptr || cu_seqlens_k == nullptr || w_kvb == nullptr || out == nullptr) {
    return Invalid(kWhat, "null handle, q, kv_cache, block_table, cu_seqlens, w_kvb or out");
  }
  if (!Aligned(kv_cache, 16) || !Aligned(q, 16) || !Aligned(out, 2 * sizeof(OutT)) ||
      (gate != nullptr && !Aligned(gate, 8))) {
    return Invalid(kWhat, "kv_cache and q must be 16-byte, out 2-element and gate 8-byte aligned");
  }
  auto* base = static_cast<unsigned char*>(workspace);
  const int64_t acc_offset = LatentBytes(p) + ExpandedBytes(p);
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(base + acc_offset, 0, static_cast<size_t>(OAccBytes(p) + MlBytes(p)), stream),
      "MlaPrefillMha cudaMemsetAsync");
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(MlaPrefillAttnKernel<float, true>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
      "MlaPrefillMha cudaFuncSetAttribute");
  for (int64_t w0 = 0; w0 < p.total_context; w0 += p.max_context_chunk) {
    const int rows = static_cast<int>(std::min(p.max_context_chunk, p.total_context - w0));
    RETURN_IF_ERROR(MhaWindow(handle, q, kv_cache, block_table, cu_seqlens_q, cu_seqlens_k, w_kvb,
                              p, base, w0, rows, stream));
  }
  const int64_t pairs = AccumulatorRows(p) * (kMlaVHeadDim / 2);
  const int64_t blocks = std::min<int64_t>((pairs + 255) / 256, 132 * 16);
  internal::LaunchKernel(MlaPrefillFinalizeKernel<OutT>, static_cast<unsigned>(blocks), 256, 0,
                         stream, reinterpret_cast<const float*>(base + acc_offset),
                         reinterpret_cast<const float*>(base + acc_offset + OAccBytes(p)), gate,
                         pairs, out);
  return LaunchStatus("MlaPrefillMha MlaPrefillFinalizeKernel launch");
}

template <typename OutT>
absl::Status Mha(cublasHandle_t handle, const uint16_t* q, const void* kv_cache,
                 const int32_t* block_table, const int32_t* cu_seqlens_q,
                 const int32_t* cu_seqlens_k, const uint16_t* w_kvb, const float* gate,
                 const MlaPrefillParams& p, void* workspace, int64_t workspace_bytes, OutT* out,
                 cudaStream_t stream) {
  if (Chunked(p)) {
    return ChunkedMha(handle, q, kv_cache, block_table, cu_seqlens_q, cu_seqlens_k, w_kvb, gate, p,
                      workspace, workspace_bytes, out, stream);
  }
  absl::Status status = MlaPrefillExpand(handle, kv_cache, block_table, cu_seqlens_k, w_kvb, p,
                                         workspace, workspace_bytes, stream);
  if (!status.ok()) return status;
  return Attention(q, cu_seqlens_q, cu_seqlens_k, gate, p, workspace, workspace_bytes, out, stream);
}

}  // namespace

int64_t MlaPrefillWorkspaceBytes(const MlaPrefillParams& params) {
  return LatentBytes(params) + ExpandedBytes(params) + OAccBytes(params) + MlBytes(params);
}

int64_t MlaPrefillContextChunkFor(const MlaPrefillParams& params, int64_t budget_bytes) {
  MlaPrefillParams p = params;
  p.max_context_chunk = 0;
  if (MlaPrefillWorkspaceBytes(p) <= budget_bytes) return 0;
  // Chunked: W · row_bytes (two parts, each padded by < 256 B) + the accumulators.
  p.max_context_chunk = 1;
  const int64_t fixed = OAccBytes(p) + MlBytes(p) + 2 * kAlign;
  const int64_t row_bytes =
      (kMlaLatentDim + static_cast<int64_t>(std::max(p.num_heads, 0)) * kMlaKvbRowsPerHead) * 2;
  int64_t w = (budget_bytes - fixed) / row_bytes / kMlaPageSize * kMlaPageSize;
  w = std::min(w, (p.total_context - 1) / kMlaPageSize * kMlaPageSize);  // stay chunked
  for (; w >= kMlaPageSize; w -= kMlaPageSize) {
    p.max_context_chunk = w;
    if (MlaPrefillWorkspaceBytes(p) <= budget_bytes) return w;
  }
  return -1;
}

absl::Status MlaPrefillExpand(cublasHandle_t handle, const void* kv_cache,
                              const int32_t* block_table, const int32_t* cu_seqlens_k,
                              const uint16_t* w_kvb, const MlaPrefillParams& p, void* workspace,
                              int64_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kWhat = "MlaPrefillExpand";
  RETURN_IF_ERROR(CheckParams(p, workspace, workspace_bytes, kWhat));
  RETURN_IF_ERROR(CheckUnchunked(p, kWhat));
  if (p.num_seqs == 0 || p.total_context == 0 || p.max_context == 0) return absl::OkStatus();
  if (handle == nullptr || kv_cache == nullptr || block_table == nullptr ||
      cu_seqlens_k == nullptr || w_kvb == nullptr) {
    return Invalid(kWhat, "null handle, kv_cache, block_table, cu_seqlens_k or w_kvb");
  }
  if (!Aligned(kv_cache, 16)) return Invalid(kWhat, "kv_cache must be 16-byte aligned");
  auto* base = static_cast<unsigned char*>(workspace);
  auto* latent = reinterpret_cast<uint16_t*>(base);
  auto* kv = reinterpret_cast<uint16_t*>(base + LatentBytes(p));
  const int pages = (p.max_context + kMlaPageSize - 1) / kMlaPageSize;
  if (p.cache_dtype == LatentDType::kFP8) {
    internal::LaunchKernel(GatherLatentKernel<true>, dim3(pages, p.num_seqs), 256, 0, stream,
                           kv_cache, block_table, cu_seqlens_k, p.max_blocks_per_seq, latent);
  } else {
    internal::LaunchKernel(GatherLatentKernel<false>, dim3(pages, p.num_seqs), 256, 0, stream,
                           kv_cache, block_table, cu_seqlens_k, p.max_blocks_per_seq, latent);
  }
  const absl::Status launch = LaunchStatus("MlaPrefillExpand GatherLatentKernel launch");
  if (!launch.ok()) return launch;
  // KV [total_context, H·256] = L[:, :512] · W_kvbᵀ (row stride 576 skips k_pe).
  const int64_t n = static_cast<int64_t>(p.num_heads) * kMlaKvbRowsPerHead;
  return GemmBf16(handle, latent, p.total_context, kLatentRank, kMlaLatentDim, w_kvb, n, kv, n,
                  stream);
}

absl::Status MlaPrefillAttention(const uint16_t* q, const int32_t* cu_seqlens_q,
                                 const int32_t* cu_seqlens_k, const float* gate,
                                 const MlaPrefillParams& params, const void* workspace,
                                 int64_t workspace_bytes, float* out, cudaStream_t stream) {
  return Attention(q, cu_seqlens_q, cu_seqlens_k, gate, params, workspace, workspace_bytes, out,
                   stream);
}

absl::Status MlaPrefillAttention(const uint16_t* q, const int32_t* cu_seqlens_q,
                                 const int32_t* cu_seqlens_k, const float* gate,
                                 const MlaPrefillParams& params, const void* workspace,
                                 int64_t workspace_bytes, uint16_t* out, cudaStream_t stream) {
  return Attention(q, cu_seqlens_q, cu_seqlens_k, gate, params, workspace, workspace_bytes, out,
                   stream);
}

absl::Status MlaPrefillMha(cublasHandle_t handle, const uint16_t* q, const void* kv_cache,
                           const int32_t* block_table, const int32_t* cu_seqlens_q,
                           const int32_t* cu_seqlens_k, const uint16_t* w_kvb, const float* gate,
                           const MlaPrefillParams& params, void* workspace, int64_t workspace_bytes,
                           float* out, cudaStream_t stream) {
  return Mha(handle, q, kv_cache, block_table, cu_seqlens_q, cu_seqlens_k, w_kvb, gate, params,
             workspace, workspace_bytes, out, stream);
}

absl::Status MlaPrefillMha(cublasHandle_t handle, const uint16_t* q, const void* kv_cache,
                           const int32_t* block_table, const int32_t* cu_seqlens_q,
                           const int32_t* cu_seqlens_k, const uint16_t* w_kvb, const float* gate,
                           const MlaPrefillParams& params, void* workspace, int64_t workspace_bytes,
                           uint16_t* out, cudaStream_t stream) {
  return Mha(handle, q, kv_cache, block_table, cu_seqlens_q, cu_seqlens_k, w_kvb, gate, params,
             workspace, workspace_bytes, out, stream);
}

absl::Status MlaOutputGate(float* o, const float* gate, int64_t rows, int64_t width,
                           cudaStream_t stream) {
  if (rows < 0 || width < 0) {
    return Invalid("MlaOutputGate", absl::StrCat("rows ", rows, " or width ", width, " < 0"));
  }
  const int64_t n = rows * width;
  if (n == 0) return absl::OkStatus();
  if (o == nullptr || gate == nullptr) return Invalid("MlaOutputGate", "null o or gate");
  const bool vec4 = n % 4 == 0 && Aligned(o, 16) && Aligned(gate, 16);
  const int64_t work = vec4 ? n / 4 : n;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((work + threads - 1) / threads, 132 * 16);
  internal::LaunchKernel(OutputGateKernel, static_cast<unsigned>(blocks), threads, 0, stream, o,
                         gate, n, vec4);
  return LaunchStatus("MlaOutputGate OutputGateKernel launch");
}

}  // namespace strata::kernels::cuda
