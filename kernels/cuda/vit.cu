#include "kernels/cuda/vit.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/launch.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

// Source taps of output index i (PyTorch's bilinear, align_corners false).
__device__ void SourceTap(int i, int in, int out, int* lo, int* hi, double* frac) {
  double src = (i + 0.5) * in / out - 0.5;
  if (src < 0) src = 0;
  *lo = min(static_cast<int>(src), in - 1);
  *hi = min(*lo + 1, in - 1);
  *frac = src - *lo;
}

// One thread per (output position, channel).
__global__ void AddBilinearPositionsKernel(const float* __restrict__ table, int in_h, int in_w,
                                           int d, int out_h, int out_w, float* __restrict__ x) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t{out_h} * out_w * d) return;
  const int e = static_cast<int>(i % d);
  const int64_t pos = i / d;
  const int r = static_cast<int>(pos / out_w), c = static_cast<int>(pos % out_w);
  int ylo, yhi, xlo, xhi;
  double fy, fx;
  SourceTap(r, in_h, out_h, &ylo, &yhi, &fy);
  SourceTap(c, in_w, out_w, &xlo, &xhi, &fx);
  auto at = [&](int y, int xx) {
    return static_cast<double>(table[(int64_t{y} * in_w + xx) * d + e]);
  };
  const double top = at(ylo, xlo) * (1 - fx) + at(ylo, xhi) * fx;
  const double bottom = at(yhi, xlo) * (1 - fx) + at(yhi, xhi) * fx;
  x[i] = static_cast<float>(x[i] + top * (1 - fy) + bottom * fy);
}

// One thread per (row, head, pair of pairs i): dims (4i, 4i+1) by column, (4i+2, 4i+3) by row.
__global__ void Rope2dKernel(float* __restrict__ x, int64_t stride, int grid_h, int grid_w,
                             int num_heads, int head_dim, float theta) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int quarter = head_dim / 4;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t{grid_h} * grid_w * num_heads * quarter) return;
  const int q = static_cast<int>(i % quarter);
  const int h = static_cast<int>((i / quarter) % num_heads);
  const int64_t pos = i / (int64_t{quarter} * num_heads);
  const int r = static_cast<int>(pos / grid_w), c = static_cast<int>(pos % grid_w);
  float* head = x + pos * stride + int64_t{h} * head_dim + 4 * q;
  const double f = pow(static_cast<double>(theta), -4.0 * q / head_dim);
  const double angles[2] = {c * f, r * f};
  for (int k = 0; k < 2; ++k) {
    double s, co;
    sincos(angles[k], &s, &co);
    const double a = head[2 * k], b = head[2 * k + 1];
    head[2 * k] = static_cast<float>(a * co - b * s);
    head[2 * k + 1] = static_cast<float>(a * s + b * co);
  }
}

constexpr int kAttnRows = 64;  // query rows (threads) per CTA
constexpr int kAttnKeys = 32;  // keys per shared-memory tile

// CTA (query tile, head); thread = one query row: q and the output accumulator in registers /
// local memory, the tile's keys and values in shared memory, an online softmax over the tiles.
__global__ void __launch_bounds__(kAttnRows)
    VitAttentionKernel(const float* __restrict__ q, const float* __restrict__ k,
                       const float* __restrict__ v, int64_t stride, int64_t n, int head_dim,
                       float scale, float* __restrict__ out, int64_t out_stride) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ float ks[kAttnKeys * kVitMaxHeadDim];
  __shared__ float vs[kAttnKeys * kVitMaxHeadDim];
  const int64_t col = static_cast<int64_t>(blockIdx.y) * head_dim;
  const int64_t p = static_cast<int64_t>(blockIdx.x) * kAttnRows + threadIdx.x;
  const bool live = p < n;
  float qr[kVitMaxHeadDim], acc[kVitMaxHeadDim];
  for (int e = 0; e < head_dim; ++e) {
    qr[e] = live ? q[p * stride + col + e] * scale : 0.0f;
    acc[e] = 0.0f;
  }
  float max = -INFINITY, sum = 0.0f;
  for (int64_t j0 = 0; j0 < n; j0 += kAttnKeys) {
    const int keys = static_cast<int>(n - j0 < kAttnKeys ? n - j0 : kAttnKeys);
    __syncthreads();  // the previous tile is used up
    for (int t = threadIdx.x; t < keys * head_dim; t += kAttnRows) {
      const int64_t j = j0 + t / head_dim;
      const int e = t % head_dim;
      ks[t] = k[j * stride + col + e];
      vs[t] = v[j * stride + col + e];
    }
    __syncthreads();
    if (!live) continue;
    for (int j = 0; j < keys; ++j) {
      float s = 0.0f;
      for (int e = 0; e < head_dim; ++e) s += qr[e] * ks[j * head_dim + e];
      if (s > max) {  // rescale what came before to the new maximum
        const float correction = expf(max - s);
        sum *= correction;
        for (int e = 0; e < head_dim; ++e) acc[e] *= correction;
        max = s;
      }
      const float w = expf(s - max);
      sum += w;
      for (int e = 0; e < head_dim; ++e) acc[e] += w * vs[j * head_dim + e];
    }
  }
  if (!live) return;
  const float inv = 1.0f / sum;
  for (int e = 0; e < head_dim; ++e) out[p * out_stride + col + e] = acc[e] * inv;
}

__global__ void MergePatchesKernel(const float* __restrict__ x, int grid_h, int grid_w, int d,
                                   float* __restrict__ merged) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int half_w = grid_w / 2;
  if (i >= int64_t{grid_h / 2} * half_w * 4 * d) return;
  const int e = static_cast<int>(i % d);
  const int s = static_cast<int>((i / d) % 4);
  const int64_t m = i / (int64_t{4} * d);
  const int r = 2 * static_cast<int>(m / half_w) + s / 2;
  const int c = 2 * static_cast<int>(m % half_w) + s % 2;
  merged[i] = x[(int64_t{r} * grid_w + c) * d + e];
}

// 0.5·v·(1 + tanh(u)) written as v·σ(2u), and 0.5·v·(1 + erf(v/√2)) as 0.5·v·erfc(−v/√2): the
// same values without the cancellation of 1 + tanh / 1 + erf near −1, so far-negative inputs keep
// their (tiny) values to f32 precision instead of collapsing to 0.
__global__ void GeluTanhKernel(float* __restrict__ x, int64_t n) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
  x[i] = v / (1.0f + expf(-2.0f * u));
}

__global__ void GeluErfKernel(float* __restrict__ x, int64_t n) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  x[i] = 0.5f * v * erfcf(-v * 0.7071067811865476f);
}

absl::Status Shape(bool ok, const char* what) {
  return ok ? absl::OkStatus() : absl::InvalidArgumentError(absl::StrCat(what, ": bad shape"));
}

}  // namespace

absl::Status VitAddBilinearPositions(const float* table, int in_h, int in_w, int d, int out_h,
                                     int out_w, float* x, cudaStream_t stream) {
  RETURN_IF_ERROR(
      Shape(in_h > 0 && in_w > 0 && d > 0 && out_h >= 0 && out_w >= 0, "VitAddBilinearPositions"));
  const int64_t count = int64_t{out_h} * out_w * d;
  if (count == 0) return absl::OkStatus();
  internal::LaunchKernel(AddBilinearPositionsKernel, Blocks(count), kThreads, 0, stream, table,
                         in_h, in_w, d, out_h, out_w, x);
  return LaunchStatus("AddBilinearPositionsKernel launch");
}

absl::Status VitRope2d(float* x, int64_t stride, int grid_h, int grid_w, int num_heads,
                       int head_dim, float theta, cudaStream_t stream) {
  RETURN_IF_ERROR(Shape(grid_h >= 0 && grid_w >= 0 && num_heads > 0 && head_dim > 0 &&
                            head_dim % 4 == 0 && stride >= int64_t{num_heads} * head_dim,
                        "VitRope2d"));
  const int64_t count = int64_t{grid_h} * grid_w * num_heads * (head_dim / 4);
  if (count == 0) return absl::OkStatus();
  internal::LaunchKernel(Rope2dKernel, Blocks(count), kThreads, 0, stream, x, stride, grid_h,
                         grid_w, num_heads, head_dim, theta);
  return LaunchStatus("Rope2dKernel launch");
}

absl::Status VitAttention(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
                          int num_heads, int head_dim, float scale, float* out,
                          cudaStream_t stream) {
  RETURN_IF_ERROR(Shape(n >= 0 && num_heads > 0 && num_heads <= 65535 && head_dim > 0 &&
                            head_dim <= kVitMaxHeadDim && stride >= int64_t{num_heads} * head_dim,
                        "VitAttention"));
  if (n == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>((n + kAttnRows - 1) / kAttnRows),
                  static_cast<unsigned>(num_heads));
  internal::LaunchKernel(VitAttentionKernel, grid, kAttnRows, 0, stream, q, k, v, stride, n,
                         head_dim, scale, out, int64_t{num_heads} * head_dim);
  return LaunchStatus("VitAttentionKernel launch");
}

absl::Status VitMergePatches2x2(const float* x, int grid_h, int grid_w, int d, float* merged,
                                cudaStream_t stream) {
  RETURN_IF_ERROR(Shape(grid_h >= 0 && grid_w >= 0 && grid_h % 2 == 0 && grid_w % 2 == 0 && d > 0,
                        "VitMergePatches2x2"));
  const int64_t count = int64_t{grid_h} * grid_w * d;
  if (count == 0) return absl::OkStatus();
  internal::LaunchKernel(MergePatchesKernel, Blocks(count), kThreads, 0, stream, x, grid_h, grid_w,
                         d, merged);
  return LaunchStatus("MergePatchesKernel launch");
}

absl::Status GeluTanh(float* x, int64_t n, cudaStream_t stream) {
  RETURN_IF_ERROR(Shape(n >= 0, "GeluTanh"));
  if (n == 0) return absl::OkStatus();
  internal::LaunchKernel(GeluTanhKernel, Blocks(n), kThreads, 0, stream, x, n);
  return LaunchStatus("GeluTanhKernel launch");
}

absl::Status GeluErf(float* x, int64_t n, cudaStream_t stream) {
  RETURN_IF_ERROR(Shape(n >= 0, "GeluErf"));
  if (n == 0) return absl::OkStatus();
  internal::LaunchKernel(GeluErfKernel, Blocks(n), kThreads, 0, stream, x, n);
  return LaunchStatus("GeluErfKernel launch");
}

}  // namespace strata::kernels::cuda
