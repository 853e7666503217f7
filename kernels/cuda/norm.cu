#include "kernels/cuda/norm.h"

#include <algorithm>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/launch.cuh"

namespace strata::kernels::cuda {
namespace {

using internal::BlockSum;
using internal::SigmoidF;
using internal::SiluF;
using internal::StoreOut;

constexpr int kThreads = 256;

// One row per CTA. With `residual` non-null: residual += x first and the sum is normalised;
// with routed.y_perm non-null, x (or 0 when x is null) plus the row's routed sum is what is added.
template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    RmsNormKernel(const float* __restrict__ x, RoutedSum routed, float* __restrict__ residual,
                  int64_t dim, const float* __restrict__ weight, float eps, OutT* __restrict__ y) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ float red[32];
  const int64_t t = blockIdx.x, base = t * dim;
  // Element c of the row before the residual add: x, or MoeCombine's sum in its order, then its
  // add onto x.
  auto input = [&](int64_t c) {
    if (routed.y_perm == nullptr) return x[base + c];
    float acc = 0.0f;
    for (int s = 0; s < routed.top_k; ++s) {
      const int32_t row = routed.pair_row[t * routed.top_k + s];
      if (row >= 0) {
        acc += routed.weights[t * routed.top_k + s] *
               routed.y_perm[static_cast<int64_t>(row) * dim + c];
      }
    }
    return x != nullptr ? acc + x[base + c] : acc;
  };
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    float v = input(c);
    if (residual != nullptr) {
      v += residual[base + c];
      residual[base + c] = v;  // re-read below by this same thread only
    }
    sq += v * v;
  }
  const float inv = 1.0f / sqrtf(BlockSum(sq, red) / static_cast<float>(dim) + eps);
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    const float w = weight != nullptr ? weight[c] : 1.0f;
    // Without a residual the routed sum is formed again (the same operations: the same bits).
    const float v = residual != nullptr ? residual[base + c] : input(c);
    StoreOut(y + base + c, v * inv * w);
  }
}

template <typename OutT>
absl::Status LaunchRmsNorm(const float* x, float* residual, int64_t rows, int64_t dim,
                           const float* weight, float eps, OutT* y, cudaStream_t stream,
                           const RoutedSum& routed = {}) {
  if (rows < 0 || dim <= 0 || rows > 0x7fffffff) {
    return absl::InvalidArgumentError("RmsNorm: bad shape");
  }
  if (routed.y_perm != nullptr &&
      (routed.top_k < 1 || routed.pair_row == nullptr || routed.weights == nullptr)) {
    return absl::InvalidArgumentError("RmsNorm: a routed sum needs top_k >= 1, pair_row, weights");
  }
  if (routed.y_perm == nullptr && x == nullptr) {
    return absl::InvalidArgumentError("RmsNorm: x may be null only with a routed sum");
  }
  if (rows == 0) return absl::OkStatus();
  internal::LaunchKernel(RmsNormKernel<OutT>, static_cast<unsigned>(rows), kThreads, 0, stream, x,
                         routed, residual, dim, weight, eps, y);
  return LaunchStatus("RmsNormKernel launch");
}

// One token per CTA; z_i by block reductions, then the weighted sum and the optional norm.
__global__ void __launch_bounds__(kThreads)
    AttnResMixKernel(AttnResSources sources, int64_t dim, const float* __restrict__ w_norm,
                     const float* __restrict__ w_proj, float eps, float* __restrict__ out,
                     const float* __restrict__ norm_weight, float norm_eps,
                     uint16_t* __restrict__ normed) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ float red[32];
  __shared__ float weight_s[kMaxAttnResSources];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  for (int i = 0; i < sources.count; ++i) {
    const float* v = sources.ptr[i] + base;
    // The partial sum's pending update: each thread writes the elements it alone reads below.
    const bool update = i == sources.count - 1 && sources.pending != nullptr;
    float dot = 0.0f, sq = 0.0f;
    for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
      float x;
      if (update) {
        const float add = sources.pending[base + c];
        x = sources.replace ? add : v[c] + add;
        sources.partial[base + c] = x;
      } else {
        x = v[c];
      }
      const float w_eff = w_norm[c] * w_proj[c];  // rounded to f32 as in the reference
      dot += w_eff * x;
      sq += x * x;
    }
    dot = BlockSum(dot, red);
    sq = BlockSum(sq, red);
    if (threadIdx.x == 0) weight_s[i] = dot / sqrtf(sq / static_cast<float>(dim) + eps);
  }
  __syncthreads();
  float z_max = -INFINITY;
  for (int i = 0; i < sources.count; ++i) z_max = fmaxf(z_max, weight_s[i]);
  float pi[kMaxAttnResSources];
  float denom = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxAttnResSources; ++i) {
    pi[i] = i < sources.count ? expf(weight_s[i] - z_max) : 0.0f;
    denom += pi[i];
  }
  const float inv_denom = 1.0f / denom;
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxAttnResSources; ++i) {
      if (i < sources.count) acc += pi[i] * sources.ptr[i][base + c];
    }
    acc *= inv_denom;
    out[base + c] = acc;
    sq += acc * acc;
  }
  if (normed == nullptr) return;  // uniform across the block: no barrier is skipped by some
  const float inv = 1.0f / sqrtf(BlockSum(sq, red) / static_cast<float>(dim) + norm_eps);
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    const float w = norm_weight != nullptr ? norm_weight[c] : 1.0f;
    StoreOut(normed + base + c, out[base + c] * inv * w);
  }
}

template <typename OutT>
__global__ void GluKernel(const float* __restrict__ gate, const float* __restrict__ up,
                          int64_t rows, int64_t width, int64_t in_stride, GluKind kind, float beta1,
                          float beta2, OutT* __restrict__ out) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t total = rows * width;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t r = i / width, c = i - r * width;
    const float g = gate[r * in_stride + c];
    const float u = up[r * in_stride + c];
    float value;
    if (kind == GluKind::kSwiGlu) {
      value = SiluF(g) * u;
    } else {
      const float capped_up = beta2 > 0.0f ? beta2 * tanhf(u / beta2) : u;
      value = beta1 * tanhf(g / beta1) * SigmoidF(g) * capped_up;
    }
    StoreOut(out + i, value);
  }
}

template <typename OutT>
absl::Status LaunchGlu(const float* gate, const float* up, int64_t rows, int64_t width,
                       int64_t in_stride, const GluParams& params, OutT* out, cudaStream_t stream) {
  if (rows < 0 || width < 0 || in_stride < width) {
    return absl::InvalidArgumentError("Glu: bad shape");
  }
  if (params.kind == GluKind::kSitu && !(params.beta1 > 0.0f)) {
    return absl::InvalidArgumentError("Glu: SiTU needs beta1 > 0");
  }
  const int64_t total = rows * width;
  if (total == 0) return absl::OkStatus();
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 132 * 16);
  internal::LaunchKernel(GluKernel<OutT>, static_cast<unsigned>(blocks), kThreads, 0, stream, gate,
                         up, rows, width, in_stride, params.kind, params.beta1, params.beta2, out);
  return LaunchStatus("GluKernel launch");
}

}  // namespace

absl::Status RmsNorm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps,
                     float* y, cudaStream_t stream) {
  return LaunchRmsNorm(x, nullptr, rows, dim, weight, eps, y, stream);
}
absl::Status RmsNorm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps,
                     uint16_t* y, cudaStream_t stream) {
  return LaunchRmsNorm(x, nullptr, rows, dim, weight, eps, y, stream);
}
absl::Status AddRmsNorm(float* residual, const float* x, int64_t rows, int64_t dim,
                        const float* weight, float eps, float* y, cudaStream_t stream) {
  return LaunchRmsNorm(x, residual, rows, dim, weight, eps, y, stream);
}
absl::Status AddRmsNorm(float* residual, const float* x, int64_t rows, int64_t dim,
                        const float* weight, float eps, uint16_t* y, cudaStream_t stream) {
  return LaunchRmsNorm(x, residual, rows, dim, weight, eps, y, stream);
}
absl::Status RmsNorm(const RoutedSum& routed, int64_t rows, int64_t dim, const float* weight,
                     float eps, uint16_t* y, cudaStream_t stream) {
  if (routed.y_perm == nullptr)
    return absl::InvalidArgumentError("RmsNorm: the routed sum needs y_perm");
  return LaunchRmsNorm(nullptr, nullptr, rows, dim, weight, eps, y, stream, routed);
}
absl::Status AddRmsNorm(float* residual, const float* x, const RoutedSum& routed, int64_t rows,
                        int64_t dim, const float* weight, float eps, uint16_t* y,
                        cudaStream_t stream) {
  if (routed.y_perm == nullptr || residual == nullptr) {
    return absl::InvalidArgumentError("AddRmsNorm: the routed sum needs y_perm and the residual");
  }
  return LaunchRmsNorm(x, residual, rows, dim, weight, eps, y, stream, routed);
}

absl::Status AttnResMix(const AttnResSources& sources, int64_t rows, int64_t dim,
                        const float* w_norm, const float* w_proj, float eps, float* out,
                        const float* norm_weight, float norm_eps, uint16_t* normed,
                        cudaStream_t stream) {
  if (sources.count < 1 || sources.count > kMaxAttnResSources || rows < 0 || dim <= 0 ||
      rows > 0x7fffffff) {
    return absl::InvalidArgumentError("AttnResMix: bad shape or source count");
  }
  if (sources.pending != nullptr &&
      (sources.partial == nullptr || sources.partial != sources.ptr[sources.count - 1])) {
    return absl::InvalidArgumentError(
        "AttnResMix: a pending update needs partial == the last source (ptr[count - 1])");
  }
  if (rows == 0) return absl::OkStatus();
  internal::LaunchKernel(AttnResMixKernel, static_cast<unsigned>(rows), kThreads, 0, stream,
                         sources, dim, w_norm, w_proj, eps, out, norm_weight, norm_eps, normed);
  return LaunchStatus("AttnResMixKernel launch");
}

absl::Status Glu(const float* gate, const float* up, int64_t rows, int64_t width, int64_t in_stride,
                 const GluParams& params, float* out, cudaStream_t stream) {
  return LaunchGlu(gate, up, rows, width, in_stride, params, out, stream);
}
absl::Status Glu(const float* gate, const float* up, int64_t rows, int64_t width, int64_t in_stride,
                 const GluParams& params, uint16_t* out, cudaStream_t stream) {
  return LaunchGlu(gate, up, rows, width, in_stride, params, out, stream);
}

}  // namespace strata::kernels::cuda
