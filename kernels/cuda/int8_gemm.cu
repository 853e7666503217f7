#include "kernels/cuda/int8_gemm.h"

#include <climits>
#include <string>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/grouped_gemm.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/launch.cuh"

namespace strata::kernels::cuda {
namespace {

using internal::FloatToBf16Bits;
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

__device__ __forceinline__ float Bf16BitsToFloat(uint32_t bits) {
  return __uint_as_float(bits << 16);
}

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
  if (m == 0) return absl::OkStatus();
  if (path == GemmInt8Path::kAuto && GemmInt8UsesGemv(m, n)) {
    return Gemv<1>(x, m, k, codes, scales, n, y, stream);
  }
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

bool GemmInt8UsesGemv(int64_t m, int64_t n) {
  if (m <= kInt8GemvAlwaysRows) return true;
  if (m > kInt8GemvMaxRows) return false;
  const int64_t tensor_core_ctas = (m + 15) / 16 * ((n + 127) / 128);  // the 16-row tiles
  return tensor_core_ctas < 2 * int64_t{internal::NumSms()};
}

int64_t GemmInt8WorkspaceBytes(int64_t m, GemmInt8Path path) {
  if (path == GemmInt8Path::kAuto && m <= kInt8GemvAlwaysRows) return 0;
  return GroupedGemmWorkspaceBytes(1, m);
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
