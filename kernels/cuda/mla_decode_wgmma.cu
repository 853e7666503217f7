#include "kernels/cuda/mla_decode_wgmma.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/hopper.cuh"
#include "kernels/cuda/internal/latent_fp8.cuh"
#include "kernels/cuda/internal/launch.cuh"
#include "kernels/cuda/internal/mla_split.cuh"
#include "kernels/cuda/internal/mma.cuh"

namespace strata::kernels::cuda::internal {
namespace {

// The transposed formulation (why: mla_decode_wgmma.h). Per 64-token page:
//   GEMM1 (warpgroup 0)  Sᵀ[64 tokens × N heads] = K[64 × 576] · Q̃ᵀ: A = the page's rows from
//                        registers (ldmatrix, or fp8 codes decoded on the way), B = Q̃ in shared
//                        memory (wgmma's no-swizzle K-major layout, written once per CTA).
//   softmax (wg 0)       online, per head = per column of Sᵀ; P rounded to bf16 into shared
//                        memory as GEMM2's B operand.
//   GEMM2 (all 4 wgs)    Oᵀ[512 dims × N] += Vᵀ · Pᵀ: warpgroup v owns dims 128v .. 128v + 127
//                        (two m64 tiles), A = Vᵀ from registers (ldmatrix.trans, or decoded fp8).
// Pages arrive by bulk copy (the TMA engine) into two buffers, each with an mbarrier, so page
// p + 1 loads while page p is computed.
constexpr int kThreads = 512;  // 4 warpgroups
constexpr int kPage = kMlaPageSize;
constexpr int kLatent = kMlaLatentDim;
constexpr int kValue = kMlaValueDim;
constexpr float kLog2e = 1.4426950408889634f;
// bf16 pages: rows padded by 16 bytes so the 8 rows of an ldmatrix fall in distinct banks.
constexpr int kRowStride = kLatent + 8;  // bf16 elements
constexpr int kRowBytes = kLatent * 2;
constexpr int kBf16PageBytes = kPage * kRowStride * 2;
constexpr int kFp8PageBytes = kPage * kFp8RowBytes;  // rows contiguous: one bulk copy a page
// Q̃ as GEMM1's B: per group of 8 heads, 72 core matrices (8 latent values each) 128 B apart.
constexpr uint32_t kQGroupBytes = (kLatent / 8) * 128;
// P as GEMM2's B: per group of 8 heads, 8 core matrices (8 tokens each) 128 B apart.
constexpr uint32_t kPGroupBytes = (kPage / 8) * 128;

template <bool kFp8, int kN>
struct Layout {
  static constexpr int kPageBytes = kFp8 ? kFp8PageBytes : kBf16PageBytes;
  static constexpr int kQ = 0;
  static constexpr int kPages = kQ + kN / 8 * static_cast<int>(kQGroupBytes);
  static constexpr int kP = kPages + 2 * kPageBytes;
  static constexpr int kRedMax = kP + kN / 8 * static_cast<int>(kPGroupBytes);  // [4 warps][kN]
  static constexpr int kRedSum = kRedMax + 4 * kN * 4;
  static constexpr int kStats = kRedSum + 4 * kN * 4;  // m, l, alpha [kN] each
  static constexpr int kBars = kStats + 3 * kN * 4;
  static constexpr int kBytes = kBars + 16;
  static_assert(kPages % 16 == 0 && kP % 16 == 0 && kBars % 8 == 0, "alignment");
  static_assert(kBytes <= 227 * 1024, "exceeds the sm_90 shared-memory limit");
};

// Element (k, n) of a no-swizzle K-major B operand whose 8-column groups are `group_bytes`
// apart (hopper.cuh).
__device__ __forceinline__ int CanonicalOffset(int k, int n, uint32_t group_bytes) {
  return (n % 8) * 16 + (n / 8) * static_cast<int>(group_bytes) + (k % 8) * 2 + (k / 8) * 128;
}

// bf16 bits of latent value `d` (< 512) of the staged fp8 row: bf16(code · scale), the value a
// bf16 cache holds for it (latent_fp8.cuh).
__device__ __forceinline__ uint32_t Fp8CodeBf16(const uint8_t* row, int d) {
  const float scale = *reinterpret_cast<const float*>(row + kFp8ScaleOffset + 4 * (d / 128));
  return FloatToBf16Bits(E4M3ToFloat(row[d]) * scale);
}

// Latent values d, d + 1 (d even) of staged row `row` as a bf16 pair.
template <bool kFp8>
__device__ __forceinline__ uint32_t LatentPairBits(const unsigned char* page, int row, int d) {
  if constexpr (kFp8) {
    const uint8_t* r = page + row * kFp8RowBytes;
    if (d >= kValue)
      return *reinterpret_cast<const uint32_t*>(r + kFp8RopeOffset + 2 * (d - kValue));
    return Fp8CodeBf16(r, d) | Fp8CodeBf16(r, d + 1) << 16;
  } else {
    return *reinterpret_cast<const uint32_t*>(page + (row * kRowStride + d) * 2);
  }
}

// GEMM1's A fragment for k-step kk: rows r0 (= 16·warp) .. r0 + 15 of the page, latent values
// 16·kk .. 16·kk + 15.
template <bool kFp8>
__device__ __forceinline__ void LoadKFragment(uint32_t (&a)[4], const unsigned char* page, int r0,
                                              int kk, int lane) {
  if constexpr (kFp8) {
    const int g = lane >> 2, t = 2 * (lane & 3), d = 16 * kk + t;
    a[0] = LatentPairBits<true>(page, r0 + g, d);
    a[1] = LatentPairBits<true>(page, r0 + g + 8, d);
    a[2] = LatentPairBits<true>(page, r0 + g, d + 8);
    a[3] = LatentPairBits<true>(page, r0 + g + 8, d + 8);
  } else {
    const auto* rows = reinterpret_cast<const uint16_t*>(page);
    LdMatrixX4(a, rows + (r0 + (lane & 15)) * kRowStride + 16 * kk + (lane >> 4) * 8);
  }
}

// GEMM2's A fragment Vᵀ: dims d0 .. d0 + 15 (rows), tokens 16·kk .. 16·kk + 15 (k).
template <bool kFp8>
__device__ __forceinline__ void LoadVtFragment(uint32_t (&a)[4], const unsigned char* page, int d0,
                                               int kk, int lane) {
  if constexpr (kFp8) {
    const int g = lane >> 2, t = 2 * (lane & 3), tok = 16 * kk + t;
    auto value = [&](int token, int d) { return Fp8CodeBf16(page + token * kFp8RowBytes, d); };
    a[0] = value(tok, d0 + g) | value(tok + 1, d0 + g) << 16;
    a[1] = value(tok, d0 + g + 8) | value(tok + 1, d0 + g + 8) << 16;
    a[2] = value(tok + 8, d0 + g) | value(tok + 9, d0 + g) << 16;
    a[3] = value(tok + 8, d0 + g + 8) | value(tok + 9, d0 + g + 8) << 16;
  } else {
    const auto* rows = reinterpret_cast<const uint16_t*>(page);
    const int m = lane >> 3, r = lane & 7;
    LdMatrixX4Trans(a, rows + (16 * kk + r + (m >> 1) * 8) * kRowStride + d0 + (m & 1) * 8);
  }
}

// Starts page `block`'s copy into `buffer` (warp 0 issues; valid_tokens rows come from the
// cache, the barrier's phase expects exactly their bytes), and zero-fills the rest (all
// threads): their P is 0, and 0 · garbage could be NaN.
template <bool kFp8>
__device__ __forceinline__ void StartPage(unsigned char* buffer, uint64_t* bar,
                                          const void* kv_cache, int32_t block, int valid_tokens) {
  if (block < 0) valid_tokens = 0;
  const int tid = threadIdx.x;
  if (tid < 32) {
    if constexpr (kFp8) {
      const auto* src =
          static_cast<const uint8_t*>(kv_cache) + static_cast<int64_t>(block) * kFp8PageBytes;
      if (tid == 0) {
        MbarrierArriveExpectTx(bar, valid_tokens * kFp8RowBytes);
        if (valid_tokens > 0) CpAsyncBulkToShared(buffer, src, valid_tokens * kFp8RowBytes, bar);
      }
    } else {
      const auto* src =
          static_cast<const uint16_t*>(kv_cache) + static_cast<int64_t>(block) * kPage * kLatent;
      if (tid == 0) MbarrierArriveExpectTx(bar, valid_tokens * kRowBytes);
      for (int r = tid; r < valid_tokens; r += 32) {
        CpAsyncBulkToShared(buffer + r * kRowStride * 2, src + r * kLatent, kRowBytes, bar);
      }
    }
  }
  if (valid_tokens < kPage) {
    constexpr int kRowPitch = kFp8 ? kFp8RowBytes : kRowStride * 2;
    constexpr int kChunks = (kFp8 ? kFp8RowBytes : kRowBytes) / 16;
    for (int c = tid; c < (kPage - valid_tokens) * kChunks; c += kThreads) {
      const int row = valid_tokens + c / kChunks;
      *reinterpret_cast<uint4*>(buffer + row * kRowPitch + (c % kChunks) * 16) =
          make_uint4(0u, 0u, 0u, 0u);
    }
    FenceProxyAsync();  // before a later bulk copy writes these bytes
  }
}

// Grid (head tiles, splits, batch): the split's normalised ō rows into o_part [batch, splits,
// H, 512] and its log2-domain LSE into lse_part [batch, splits, H] (MlaCombineKernel's input).
template <bool kFp8, int kN>
__global__ void __launch_bounds__(kThreads, 1)
    MlaDecodeWgmmaKernel(const uint16_t* __restrict__ q_abs, const void* __restrict__ kv_cache,
                         const int32_t* __restrict__ block_table,
                         const int32_t* __restrict__ query_seq,
                         const int32_t* __restrict__ seq_lens, int num_heads,
                         int max_blocks_per_seq, int pages_per_split, int num_splits,
                         float scale_log2, float* __restrict__ o_part,
                         float* __restrict__ lse_part) {
  AwaitPriorGrids();  // before any memory access (launch.cuh)
  using L = Layout<kFp8, kN>;
  STRATA_DYNAMIC_SHARED(smem);
  unsigned char* q_b = smem + L::kQ;
  unsigned char* const pages = smem + L::kPages;  // two buffers, L::kPageBytes each
  unsigned char* p_b = smem + L::kP;
  float* red_max = reinterpret_cast<float*>(smem + L::kRedMax);
  float* red_sum = reinterpret_cast<float*>(smem + L::kRedSum);
  float* row_m = reinterpret_cast<float*>(smem + L::kStats);
  float* row_l = row_m + kN;
  float* row_alpha = row_l + kN;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L::kBars);

  const MlaSplit sp = MlaSplitOfThisCta(seq_lens, num_heads, kN, pages_per_split, num_splits);
  if (sp.page_begin >= sp.page_end) {  // nothing to attend to in this split
    WriteEmptySplit(sp, o_part, lse_part);
    return;
  }
  const int b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = 2 * (lane & 3);

  const int64_t table_row = query_seq != nullptr ? query_seq[b] : b;
  const int32_t* table = block_table + table_row * max_blocks_per_seq;
  auto valid_in = [&](int page) { return min(kPage, sp.seq_len - page * kPage); };
  if (tid == 0) {
    MbarrierInit(&bars[0], 1);
    MbarrierInit(&bars[1], 1);
    FenceMbarrierInit();
  }
  // Q̃ rows (zero past the last head) into GEMM1's B layout, 16 bytes at a time.
  const uint16_t* q_src = q_abs + (static_cast<int64_t>(b) * num_heads + sp.head0) * kLatent;
  for (int c = tid; c < kN * (kLatent / 8); c += kThreads) {
    const int h = c / (kLatent / 8), chunk = c % (kLatent / 8);
    *reinterpret_cast<uint4*>(q_b + CanonicalOffset(8 * chunk, h, kQGroupBytes)) =
        h < sp.heads_here ? *reinterpret_cast<const uint4*>(q_src + h * kLatent + 8 * chunk)
                          : make_uint4(0u, 0u, 0u, 0u);
  }
  if (tid < kN) {
    row_m[tid] = -INFINITY;
    row_l[tid] = 0.0f;
  }
  FenceProxyAsync();  // Q̃ (generic stores) before wgmma reads it
  __syncthreads();    // the barriers are initialised, Q̃ is in place
  StartPage<kFp8>(pages, &bars[0], kv_cache, table[sp.page_begin], valid_in(sp.page_begin));
  if (sp.page_begin + 1 < sp.page_end) {
    StartPage<kFp8>(pages + L::kPageBytes, &bars[1], kv_cache, table[sp.page_begin + 1],
                    valid_in(sp.page_begin + 1));
  }
  __syncthreads();  // zero-filled rows are in place

  const int wg = warp >> 2, wi = warp & 3;
  float o[2][kN / 2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) o[mt][i] = 0.0f;
  }

  for (int p = sp.page_begin; p < sp.page_end; ++p) {
    const int it = p - sp.page_begin, buf = it & 1;
    unsigned char* const page = pages + buf * L::kPageBytes;
    MbarrierWait(&bars[buf], (it >> 1) & 1);

    if (wg == 0) {
      // GEMM1, two k-steps per group, double-buffered A fragments: the group in flight keeps
      // its registers until the wait that retires it.
      float s[kN / 2];
      uint32_t a[2][2][4];
      constexpr int kSteps = kLatent / 16;  // 36
#pragma unroll
      for (int step = 0; step < kSteps; step += 2) {
        const int half = (step / 2) & 1;
        LoadKFragment<kFp8>(a[half][0], page, 16 * wi, step, lane);
        LoadKFragment<kFp8>(a[half][1], page, 16 * wi, step + 1, lane);
        WgmmaFence();
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          WgmmaBf16<kN>(s, a[half][u], WgmmaDescriptor(q_b + (step + u) * 256, 128, kQGroupBytes),
                        step + u > 0);
        }
        WgmmaCommit();
        WgmmaWait<1>();
      }
      WgmmaWait<0>();
      WgmmaFenceOperands(s);

      // Online softmax over this page's tokens, one column (head) of Sᵀ at a time.
      const int tok_lo = p * kPage + 16 * wi + g;
      float col_max[kN / 4];
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int token = tok_lo + (i >= 2 ? 8 : 0);
          s[4 * j + i] = token < sp.seq_len ? s[4 * j + i] * scale_log2 : -INFINITY;
        }
        col_max[2 * j] = fmaxf(s[4 * j], s[4 * j + 2]);
        col_max[2 * j + 1] = fmaxf(s[4 * j + 1], s[4 * j + 3]);
      }
#pragma unroll
      for (int c = 0; c < kN / 4; ++c) {
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) {
          col_max[c] = fmaxf(col_max[c], __shfl_xor_sync(0xffffffffu, col_max[c], x));
        }
      }
      if (g == 0) {
#pragma unroll
        for (int j = 0; j < kN / 8; ++j) {
          red_max[wi * kN + 8 * j + t] = col_max[2 * j];
          red_max[wi * kN + 8 * j + t + 1] = col_max[2 * j + 1];
        }
      }
      NamedBarrierSync(1, 128);
      float col_sum[kN / 4];
#pragma unroll
      for (int c = 0; c < kN / 4; ++c) {
        const int head = 8 * (c / 2) + t + (c & 1);
        float m_new = row_m[head];
#pragma unroll
        for (int w = 0; w < 4; ++w) m_new = fmaxf(m_new, red_max[w * kN + head]);
        float sum = 0.0f;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int i = 4 * (c / 2) + 2 * half + (c & 1);
          const uint16_t pv = FloatToBf16Bits(exp2f(s[i] - m_new));
          *reinterpret_cast<uint16_t*>(
              p_b + CanonicalOffset(16 * wi + g + 8 * half, head, kPGroupBytes)) = pv;
          sum += Bf16BitsToFloat(pv);  // l sums the rounded P that GEMM2 uses
        }
        col_sum[c] = sum;
      }
#pragma unroll
      for (int c = 0; c < kN / 4; ++c) {
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) col_sum[c] += __shfl_xor_sync(0xffffffffu, col_sum[c], x);
      }
      if (g == 0) {
#pragma unroll
        for (int j = 0; j < kN / 8; ++j) {
          red_sum[wi * kN + 8 * j + t] = col_sum[2 * j];
          red_sum[wi * kN + 8 * j + t + 1] = col_sum[2 * j + 1];
        }
      }
      FenceProxyAsync();  // P (generic stores) before GEMM2's wgmma reads it
      NamedBarrierSync(1, 128);
      if (tid < kN) {
        const float m_old = row_m[tid];
        float m_new = m_old, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          m_new = fmaxf(m_new, red_max[w * kN + tid]);
          sum += red_sum[w * kN + tid];
        }
        const float alpha = exp2f(m_old - m_new);  // 0 on the first page (m_old = −∞)
        row_alpha[tid] = alpha;
        row_l[tid] = row_l[tid] * alpha + sum;
        row_m[tid] = m_new;
      }
    }
    __syncthreads();  // P, alpha in place

    // GEMM2: rescale, then Oᵀ += Vᵀ · Pᵀ over the page's 4 token steps, both m64 tiles.
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
      const float a0 = row_alpha[8 * j + t], a1 = row_alpha[8 * j + t + 1];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        o[mt][4 * j] *= a0;
        o[mt][4 * j + 1] *= a1;
        o[mt][4 * j + 2] *= a0;
        o[mt][4 * j + 3] *= a1;
      }
    }
    uint32_t av[2][kPage / 16][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int kk = 0; kk < kPage / 16; ++kk) {
        LoadVtFragment<kFp8>(av[mt][kk], page, 128 * wg + 64 * mt + 16 * wi, kk, lane);
      }
      WgmmaFenceOperands(o[mt]);
    }
    WgmmaFence();
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int kk = 0; kk < kPage / 16; ++kk) {
        WgmmaBf16<kN>(o[mt], av[mt][kk], WgmmaDescriptor(p_b + kk * 256, 128, kPGroupBytes), true);
      }
    }
    WgmmaCommit();
    WgmmaWait<0>();
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) WgmmaFenceOperands(o[mt]);
    __syncthreads();  // the page buffer, P and alpha are free again

    if (p + 2 < sp.page_end) {
      StartPage<kFp8>(page, &bars[buf], kv_cache, table[p + 2], valid_in(p + 2));
    }
  }

#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    const int dim = 128 * wg + 64 * mt + 16 * wi + g;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int head = 8 * j + t + (i & 1);
        if (head < sp.heads_here) {
          o_part[(sp.part_row0 + head) * kValue + dim + (i >= 2 ? 8 : 0)] =
              o[mt][4 * j + i] / row_l[head];
        }
      }
    }
  }
  if (tid < sp.heads_here) lse_part[sp.part_row0 + tid] = row_m[tid] + log2f(row_l[tid]);
}

template <bool kFp8, int kN>
absl::Status Launch(const MlaWgmmaLaunch& l, cudaStream_t stream) {
  constexpr int kBytes = Layout<kFp8, kN>::kBytes;
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(MlaDecodeWgmmaKernel<kFp8, kN>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes),
      "MlaDecodeWgmma cudaFuncSetAttribute");
  const dim3 grid((l.num_heads + kN - 1) / kN, l.num_splits, l.batch);
  LaunchKernel(MlaDecodeWgmmaKernel<kFp8, kN>, grid, kThreads, kBytes, stream, l.q_abs, l.kv_cache,
               l.block_table, l.query_seq, l.seq_lens, l.num_heads, l.max_blocks_per_seq,
               l.pages_per_split, l.num_splits, l.scale * kLog2e, l.o_part, l.lse_part);
  return LaunchStatus("MlaDecodeWgmmaKernel launch");
}

template <bool kFp8>
absl::Status LaunchFor(const MlaWgmmaLaunch& l, cudaStream_t stream) {
  switch (MlaWgmmaHeadTile(l.num_heads)) {
    case 16:
      return Launch<kFp8, 16>(l, stream);
    case 32:
      return Launch<kFp8, 32>(l, stream);
    default:
      return Launch<kFp8, 48>(l, stream);
  }
}

}  // namespace

int MlaWgmmaHeadTile(int num_heads) {
  if (num_heads <= 16) return 16;
  if (num_heads <= 32) return 32;
  if (num_heads <= 48) return 48;
  // Fewest tiles of ≤ 48 heads, each as small as the split allows (96 → 2 × 48, 64 → 2 × 32).
  const int tiles = (num_heads + 47) / 48;
  const int per_tile = (num_heads + tiles - 1) / tiles;
  return per_tile <= 16 ? 16 : per_tile <= 32 ? 32 : 48;
}

absl::Status LaunchMlaDecodeWgmma(const MlaWgmmaLaunch& l, bool fp8, cudaStream_t stream) {
  return fp8 ? LaunchFor<true>(l, stream) : LaunchFor<false>(l, stream);
}

}  // namespace strata::kernels::cuda::internal
