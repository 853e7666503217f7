#include "kernels/cuda/int8_gemm.h"

#include <climits>
#include <string>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/grouped_gemm.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/launch.cuh"
#include "kernels/cuda/internal/mma.cuh"

namespace strata::kernels::cuda {
namespace {

using internal::Bf16BitsToFloat;
using internal::FloatToBf16Bits;
using internal::Int8PairToBf16x2;
using internal::MmaBf16Group32;
using internal::StoreOut;

constexpr int kWarps = 4;  // per CTA; they split k
// Weight rows (outputs) per CTA: 4 share each activation load; past 8 activation rows, 2 keep
// the accumulators and decoded codes in registers (4 spilled at 16 rows).
template <int M>
constexpr int RowsPerCta() {
  return M > 8 ? 2 : 4;
}
constexpr int kCodesPerLane = 16;  // one 16-byte load per row and step: half a group
constexpr int kWarpStep = 32 * kCodesPerLane;
constexpr int kDequantThreads = 256;

// The 16 codes of a 16-byte word as floats.
__device__ __forceinline__ void CodesToFloats(const uint4& q, float (&w)[kCodesPerLane]) {
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < kCodesPerLane; ++i) {
    w[i] = static_cast<float>(static_cast<int8_t>((words[i >> 2] >> ((i & 3) * 8)) & 0xffu));
  }
}

// The 16 bf16 activations at x as floats (two 16-byte loads).
__device__ __forceinline__ void ActivationsToFloats(const uint16_t* x, float (&v)[kCodesPerLane]) {
  const uint4 a = reinterpret_cast<const uint4*>(x)[0];
  const uint4 b = reinterpret_cast<const uint4*>(x)[1];
  const uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    v[2 * i] = Bf16BitsToFloat(words[i] & 0xffffu);
    v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// y[m, row] for the CTA's RowsPerCta<M>() rows (rows past n repeat the last one and are not
// stored). Warp w takes the steps w, w + kWarps, … of kWarpStep codes; lane l the 16 codes at 16·l
// within a step. Each partial sum over 16 codes is scaled once by its group's scale.
template <int M, typename OutT>
__global__ void __launch_bounds__(kWarps * 32)
    Int8GemvKernel(const uint16_t* __restrict__ x, const int8_t* __restrict__ codes,
                   const uint16_t* __restrict__ scales, int64_t n, int64_t k,
                   OutT* __restrict__ y) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  constexpr int kRowsPerCta = RowsPerCta<M>();
  __shared__ float partial[kWarps][kRowsPerCta * M];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRowsPerCta;
  const int64_t groups = k / 32;
  const int8_t* wrow[kRowsPerCta];
  const uint16_t* srow[kRowsPerCta];
#pragma unroll
  for (int r = 0; r < kRowsPerCta; ++r) {
    const int64_t row = row0 + r < n ? row0 + r : n - 1;
    wrow[r] = codes + row * k;
    srow[r] = scales + row * groups;
  }
  float acc[kRowsPerCta][M];
#pragma unroll
  for (int r = 0; r < kRowsPerCta; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;
  }
#pragma unroll 2
  for (int64_t k0 = static_cast<int64_t>(warp) * kWarpStep + lane * kCodesPerLane; k0 < k;
       k0 += static_cast<int64_t>(kWarps) * kWarpStep) {
    uint4 q[kRowsPerCta];
    float s[kRowsPerCta];
#pragma unroll
    for (int r = 0; r < kRowsPerCta; ++r) {
      q[r] = *reinterpret_cast<const uint4*>(wrow[r] + k0);
      s[r] = Bf16BitsToFloat(srow[r][k0 / 32]);
    }
    float w[kRowsPerCta][kCodesPerLane];
#pragma unroll
    for (int r = 0; r < kRowsPerCta; ++r) CodesToFloats(q[r], w[r]);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float v[kCodesPerLane];
      ActivationsToFloats(x + m * k + k0, v);
#pragma unroll
      for (int r = 0; r < kRowsPerCta; ++r) {
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < kCodesPerLane; ++i) part = fmaf(v[i], w[r][i], part);
        acc[r][m] = fmaf(s[r], part, acc[r][m]);
      }
    }
  }
  // Lanes, then warps.
#pragma unroll
  for (int r = 0; r < kRowsPerCta; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float v = acc[r][m];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) partial[warp][r * M + m] = v;
    }
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < kRowsPerCta * M) {
    const int r = t / M, m = t % M;
    if (row0 + r < n) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += partial[w][t];
      StoreOut(y + m * n + row0 + r, sum);
    }
  }
}

template <int M, typename OutT>
absl::Status LaunchGemv(const uint16_t* x, int64_t k, const int8_t* codes, const uint16_t* scales,
                        int64_t n, OutT* y, cudaStream_t stream) {
  constexpr int kRowsPerCta = RowsPerCta<M>();
  const int64_t blocks = (n + kRowsPerCta - 1) / kRowsPerCta;
  internal::LaunchKernel(Int8GemvKernel<M, OutT>, static_cast<unsigned>(blocks), kWarps * 32, 0,
                         stream, x, codes, scales, n, k, y);
  return LaunchStatus("Int8GemvKernel launch");
}

// The GEMV instantiated for m rows: Gemv<1> tries 1, 2, … kInt8GemvMaxRows.
template <int M, typename OutT>
absl::Status Gemv(const uint16_t* x, int64_t m, int64_t k, const int8_t* codes,
                  const uint16_t* scales, int64_t n, OutT* y, cudaStream_t stream) {
  if constexpr (M > kInt8GemvMaxRows) {
    return absl::InternalError("GemmInt8: no GEMV for this row count");
  } else {
    if (m == M) return LaunchGemv<M>(x, k, codes, scales, n, y, stream);
    return Gemv<M + 1>(x, m, k, codes, scales, n, y, stream);
  }
}

// ---- skinny path: tensor cores at 2–16 rows -------------------------------------------------

constexpr int kSkinnyWarps = 4;  // split k in four contiguous ranges
constexpr int kSkinnyTiles = 2;  // n8 mma tiles per warp: 16 weight rows per CTA
constexpr int kSkinnyCols = 8 * kSkinnyTiles;
constexpr int kSkinnyGroupsInFlight = 4;  // groups of 32 codes a lane loads before it computes

// y[m, n] = x · Wᵀ for the CTA's 16 weight rows (rows past n repeat the last one and are not
// stored). Warp w sums groups [w·G/4, (w+1)·G/4) of every row. Per group lane (g = lane / 4,
// q = lane % 4) loads codes 8q … 8q+7 of weight rows 8t + g (t = 0, 1) and activations 8q … 8q+7
// of rows g and g + 8 (zero past m; kUpper false: m ≤ 8, row g + 8 is never read) and runs the
// group's two m16n8k16 steps (MmaBf16Group32, mma.cuh).
template <bool kUpper, typename OutT>
__global__ void __launch_bounds__(kSkinnyWarps * 32)
    Int8SkinnyKernel(const uint16_t* __restrict__ x, int m, const int8_t* __restrict__ codes,
                     const uint16_t* __restrict__ scales, int64_t n, int64_t k,
                     OutT* __restrict__ y) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ float partial[kSkinnyWarps][16][kSkinnyCols];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kSkinnyCols;
  const int groups = static_cast<int>(k / 32);
  const int g_begin = warp * groups / kSkinnyWarps, g_end = (warp + 1) * groups / kSkinnyWarps;
  const int8_t* wrow[kSkinnyTiles];
  const uint16_t* srow[kSkinnyTiles];
#pragma unroll
  for (int t = 0; t < kSkinnyTiles; ++t) {
    const int64_t row = col0 + 8 * t + g < n ? col0 + 8 * t + g : n - 1;
    wrow[t] = codes + row * k + 8 * q;
    srow[t] = scales + row * groups;
  }
  const bool has_lo = g < m, has_hi = kUpper && g + 8 < m;
  const uint16_t* x_lo = x + (has_lo ? g : 0) * k + 8 * q;
  const uint16_t* x_hi = x + (has_hi ? g + 8 : 0) * k + 8 * q;
  float acc[kSkinnyTiles][4] = {};
  for (int g0 = g_begin; g0 < g_end; g0 += kSkinnyGroupsInFlight) {
    uint2 c[kSkinnyGroupsInFlight][kSkinnyTiles];
    float sc[kSkinnyGroupsInFlight][kSkinnyTiles];
    uint4 a_lo[kSkinnyGroupsInFlight], a_hi[kSkinnyGroupsInFlight];
#pragma unroll
    for (int u = 0; u < kSkinnyGroupsInFlight; ++u) {  // every load first: 4 groups in flight
      const int gg = g0 + u;
      const bool valid = gg < g_end;
#pragma unroll
      for (int t = 0; t < kSkinnyTiles; ++t) {
        c[u][t] = valid ? *reinterpret_cast<const uint2*>(wrow[t] + gg * 32) : make_uint2(0, 0);
        sc[u][t] = valid ? Bf16BitsToFloat(srow[t][gg]) : 0.0f;
      }
      const uint4 zero = make_uint4(0, 0, 0, 0);
      a_lo[u] = valid && has_lo ? *reinterpret_cast<const uint4*>(x_lo + gg * 32) : zero;
      a_hi[u] = valid && has_hi ? *reinterpret_cast<const uint4*>(x_hi + gg * 32) : zero;
    }
#pragma unroll
    for (int u = 0; u < kSkinnyGroupsInFlight; ++u) {
      const uint32_t lo[4] = {a_lo[u].x, a_lo[u].y, a_lo[u].z, a_lo[u].w};
      const uint32_t hi[4] = {a_hi[u].x, a_hi[u].y, a_hi[u].z, a_hi[u].w};
#pragma unroll
      for (int t = 0; t < kSkinnyTiles; ++t) {
        const uint32_t words[2] = {c[u][t].x, c[u][t].y};
        uint32_t b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) b[i] = Int8PairToBf16x2(words, i, sc[u][t]);
        MmaBf16Group32(acc[t], lo, hi, b);
      }
    }
  }
  // acc[t][2h + e]: activation row g + 8h, column 8t + 2q + e of the CTA's 16.
#pragma unroll
  for (int t = 0; t < kSkinnyTiles; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      partial[warp][g + 8 * (i >> 1)][8 * t + 2 * q + (i & 1)] = acc[t][i];
  }
  __syncthreads();
  for (int o = threadIdx.x; o < 16 * kSkinnyCols; o += kSkinnyWarps * 32) {
    const int r = o / kSkinnyCols, cc = o % kSkinnyCols;
    if (r >= m || col0 + cc >= n) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kSkinnyWarps; ++w) sum += partial[w][r][cc];
    StoreOut(y + r * n + col0 + cc, sum);
  }
}

template <typename OutT>
absl::Status LaunchSkinny(const uint16_t* x, int64_t m, int64_t k, const int8_t* codes,
                          const uint16_t* scales, int64_t n, OutT* y, cudaStream_t stream) {
  const int64_t blocks = (n + kSkinnyCols - 1) / kSkinnyCols;
  const auto kernel = m > 8 ? Int8SkinnyKernel<true, OutT> : Int8SkinnyKernel<false, OutT>;
  internal::LaunchKernel(kernel, static_cast<unsigned>(blocks), kSkinnyWarps * 32, 0, stream, x,
                         static_cast<int>(m), codes, scales, n, k, y);
  return LaunchStatus("Int8SkinnyKernel launch");
}

bool Aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename OutT>
absl::Status Run(const uint16_t* x, int64_t m, int64_t k, const int8_t* codes,
                 const uint16_t* scales, int64_t n, OutT* y, void* workspace,
                 int64_t workspace_bytes, cudaStream_t stream, GemmInt8Path path) {
  auto fail = [](const std::string& what) {
    return absl::InvalidArgumentError("GemmInt8: " + what);
  };
  if (m < 0 || m > INT_MAX) return fail("m must be in [0, 2^31)");
  if (n < 1 || k < 32 || k % 32 != 0) return fail("n must be >= 1 and k a positive multiple of 32");
  if (k >= (int64_t{1} << 24) || n * k >= (int64_t{1} << 31)) {
    return fail("k must be < 2^24 and n·k < 2^31");
  }
  if (x == nullptr || codes == nullptr || scales == nullptr || y == nullptr) {
    return fail("x, codes, scales and y must be non-null");
  }
  if (!Aligned(x, 16) || !Aligned(codes, 16) || !Aligned(y, 16) || !Aligned(scales, 2)) {
    return fail("x, codes and y must be 16-byte aligned, scales 2-byte aligned");
  }
  const int64_t needed = GemmInt8WorkspaceBytes(m, path);
  if (workspace_bytes < needed ||
      (needed > 0 && (workspace == nullptr || !Aligned(workspace, 16)))) {
    return fail("the workspace must be 16-byte aligned and >= GemmInt8WorkspaceBytes(m, path)");
  }
  if (path == GemmInt8Path::kAuto) path = GemmInt8PathFor(m);
  if ((path == GemmInt8Path::kGemv || path == GemmInt8Path::kSkinny) && m > kInt8GemvMaxRows) {
    return fail("the GEMV and skinny paths take m <= 16");
  }
  if (m == 0) return absl::OkStatus();
  if (path == GemmInt8Path::kGemv) return Gemv<1>(x, m, k, codes, scales, n, y, stream);
  if (path == GemmInt8Path::kSkinny) return LaunchSkinny(x, m, k, codes, scales, n, y, stream);
  return GroupedGemm(x, nullptr, 1, m, GroupedWeights::Int8(codes, scales), n, k, y,
                     GroupedGemmTile::kAuto, workspace, workspace_bytes, stream);
}

// One thread per code pair: one 32-bit store of two bf16.
__global__ void __launch_bounds__(kDequantThreads)
    DequantInt8Kernel(const int8_t* __restrict__ codes, const uint16_t* __restrict__ scales,
                      int64_t pairs, uint16_t* __restrict__ dst) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kDequantThreads + threadIdx.x;
  if (i >= pairs) return;
  // Groups are 16 pairs, rows whole groups: pair i belongs to scale i / 16 of the flat array.
  const float scale = Bf16BitsToFloat(scales[i / 16]);
  const float lo = static_cast<float>(codes[2 * i]) * scale;
  const float hi = static_cast<float>(codes[2 * i + 1]) * scale;
  reinterpret_cast<uint32_t*>(dst)[i] = static_cast<uint32_t>(FloatToBf16Bits(lo)) |
                                        (static_cast<uint32_t>(FloatToBf16Bits(hi)) << 16);
}

}  // namespace

GemmInt8Path GemmInt8PathFor(int64_t m) {
  return m <= 1                  ? GemmInt8Path::kGemv
         : m <= kInt8GemvMaxRows ? GemmInt8Path::kSkinny
                                 : GemmInt8Path::kTensorCores;
}

int64_t GemmInt8WorkspaceBytes(int64_t m, GemmInt8Path path) {
  if (path == GemmInt8Path::kAuto) path = GemmInt8PathFor(m);
  return path == GemmInt8Path::kTensorCores ? GroupedGemmWorkspaceBytes(1, m) : 0;
}

absl::Status GemmInt8(const uint16_t* x, int64_t m, int64_t k, const int8_t* codes,
                      const uint16_t* scales, int64_t n, float* y, void* workspace,
                      int64_t workspace_bytes, cudaStream_t stream, GemmInt8Path path) {
  return Run(x, m, k, codes, scales, n, y, workspace, workspace_bytes, stream, path);
}

absl::Status GemmInt8(const uint16_t* x, int64_t m, int64_t k, const int8_t* codes,
                      const uint16_t* scales, int64_t n, uint16_t* y, void* workspace,
                      int64_t workspace_bytes, cudaStream_t stream, GemmInt8Path path) {
  return Run(x, m, k, codes, scales, n, y, workspace, workspace_bytes, stream, path);
}

absl::Status DequantInt8ToBf16(const int8_t* codes, const uint16_t* scales, int64_t rows,
                               int64_t cols, uint16_t* dst, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || cols % 32 != 0) {
    return absl::InvalidArgumentError("DequantInt8ToBf16: cols must be a multiple of 32");
  }
  if (!Aligned(dst, 4)) {
    return absl::InvalidArgumentError("DequantInt8ToBf16: dst must be 4-byte aligned");
  }
  const int64_t pairs = rows * (cols / 2);
  if (pairs == 0) return absl::OkStatus();
  const int64_t blocks = (pairs + kDequantThreads - 1) / kDequantThreads;
  if (blocks > INT_MAX) return absl::InvalidArgumentError("DequantInt8ToBf16: too large");
  internal::LaunchKernel(DequantInt8Kernel, static_cast<unsigned>(blocks), kDequantThreads, 0,
                         stream, codes, scales, pairs, dst);
  return LaunchStatus("DequantInt8Kernel launch");
}

}  // namespace strata::kernels::cuda
