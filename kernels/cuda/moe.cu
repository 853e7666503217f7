#include "kernels/cuda/moe.h"

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/internal/launch.cuh"
#include "kernels/cuda/internal/moe_permute.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned GridFor(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 132 * 16));
}

using internal::PairExpert;
using internal::PlacePair;

// Also zero-fills permuted_token (PlaceKernel, stream-ordered after it, writes the used rows).
__global__ void CountKernel(PairExpert expert_of, int64_t tokens, int32_t* __restrict__ counts,
                            int32_t* __restrict__ permuted_token) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t pairs = tokens * expert_of.top_k, live = expert_of.Live(tokens);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += stride) {
    permuted_token[p] = 0;
    const int e = expert_of(p, live);
    if (e >= 0) atomicAdd(&counts[e], 1);
  }
}

// One thread: exclusive scan of counts into offsets [E+1]; cursors start at the offsets.
__global__ void ScanKernel(const int32_t* __restrict__ counts, int num_experts,
                           int32_t* __restrict__ offsets, int32_t* __restrict__ cursors) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  int32_t sum = 0;
  for (int e = 0; e < num_experts; ++e) {
    offsets[e] = sum;
    cursors[e] = sum;
    sum += counts[e];
  }
  offsets[num_experts] = sum;
}

__global__ void PlaceKernel(PairExpert expert_of, int64_t tokens, int32_t* __restrict__ cursors,
                            int32_t* __restrict__ permuted_token, int32_t* __restrict__ pair_row) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t pairs = tokens * expert_of.top_k, live = expert_of.Live(tokens);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += stride) {
    PlacePair(expert_of, p, live, cursors, permuted_token, pair_row);
  }
}

// The whole permutation in one CTA (pairs ≤ kMoePermuteOneLaunchPairs, E ≤ kOneLaunchExperts).
constexpr int kOneLaunchThreads = 1024;
constexpr int kOneLaunchExperts = 4096;

__global__ void __launch_bounds__(kOneLaunchThreads)
    PermuteOneLaunchKernel(PairExpert expert_of, int64_t tokens, int32_t* __restrict__ offsets,
                           int32_t* __restrict__ permuted_token, int32_t* __restrict__ pair_row) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ int32_t counts[kOneLaunchExperts];
  __shared__ int32_t scan[kOneLaunchThreads];
  internal::PermuteInBlock(expert_of, tokens, counts, scan, offsets, permuted_token, pair_row);
}

// Grid-stride over rows × 16-byte chunks when dim % 8 == 0, else over elements.
__global__ void GatherKernel(const uint16_t* __restrict__ x, const int32_t* __restrict__ token,
                             int64_t rows, int64_t dim, uint16_t* __restrict__ x_perm) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (dim % 8 == 0) {
    const int64_t chunks = dim / 8;
    for (int64_t i = start; i < rows * chunks; i += stride) {
      const int64_t r = i / chunks, c = i - r * chunks;
      reinterpret_cast<uint4*>(x_perm + r * dim)[c] =
          reinterpret_cast<const uint4*>(x + static_cast<int64_t>(token[r]) * dim)[c];
    }
  } else {
    for (int64_t i = start; i < rows * dim; i += stride) {
      const int64_t r = i / dim, c = i - r * dim;
      x_perm[i] = x[static_cast<int64_t>(token[r]) * dim + c];
    }
  }
}

__global__ void CombineKernel(const float* __restrict__ y_perm,
                              const int32_t* __restrict__ pair_row,
                              const float* __restrict__ weights, int64_t tokens, int top_k,
                              int64_t dim, bool accumulate, float* __restrict__ out) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < tokens * dim;
       i += stride) {
    const int64_t t = i / dim, c = i - t * dim;
    float acc = 0.0f;
    for (int s = 0; s < top_k; ++s) {
      const int32_t row = pair_row[t * top_k + s];
      if (row >= 0) acc += weights[t * top_k + s] * y_perm[static_cast<int64_t>(row) * dim + c];
    }
    out[i] = accumulate ? acc + out[i] : acc;  // the sum first: as a combine, then an add
  }
}

absl::Status GroupedBatched(cublasHandle_t handle, const uint16_t* x_perm, const int32_t* offsets,
                            int num_experts, const uint16_t* w, int64_t n, int64_t k, void* y,
                            cudaDataType_t y_type, int64_t y_elem_bytes, void* workspace,
                            int64_t workspace_bytes, cudaStream_t stream) {
  if (workspace_bytes < MoeGroupedGemmWorkspaceBytes(num_experts) || workspace == nullptr) {
    return absl::InvalidArgumentError("MoeGroupedGemm: pointer workspace too small");
  }
  std::vector<const void*> a, b;
  std::vector<void*> c;
  std::vector<int> m_arr, n_arr, k_arr, lda, ldb, ldc, group_size;
  for (int e = 0; e < num_experts; ++e) {
    const int rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    a.push_back(w + static_cast<int64_t>(e) * n * k);
    b.push_back(x_perm + static_cast<int64_t>(offsets[e]) * k);
    c.push_back(static_cast<char*>(y) + static_cast<int64_t>(offsets[e]) * n * y_elem_bytes);
    m_arr.push_back(static_cast<int>(n));
    n_arr.push_back(rows);
    k_arr.push_back(static_cast<int>(k));
    lda.push_back(static_cast<int>(k));
    ldb.push_back(static_cast<int>(k));
    ldc.push_back(static_cast<int>(n));
    group_size.push_back(1);
  }
  const int groups = static_cast<int>(a.size());
  if (groups == 0) return absl::OkStatus();
  // Device pointer tables: [A (E) | B (E) | C (E)].
  void** table = static_cast<void**>(workspace);
  std::vector<const void*> host_table(3 * static_cast<size_t>(num_experts), nullptr);
  std::copy(a.begin(), a.end(), host_table.begin());
  std::copy(b.begin(), b.end(), host_table.begin() + num_experts);
  std::copy(c.begin(), c.end(), host_table.begin() + 2 * num_experts);
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(table, host_table.data(), host_table.size() * sizeof(void*),
                      cudaMemcpyHostToDevice, stream),
      "MoeGroupedGemm pointer-table copy");
  const std::vector<cublasOperation_t> trans_a(groups, CUBLAS_OP_T), trans_b(groups, CUBLAS_OP_N);
  const std::vector<float> alpha(groups, 1.0f), beta(groups, 0.0f);
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, stream), "MoeGroupedGemm cublasSetStream");
  STRATA_CUBLAS_RETURN_IF_ERROR(
      cublasGemmGroupedBatchedEx(handle, trans_a.data(), trans_b.data(), m_arr.data(), n_arr.data(),
                                 k_arr.data(), alpha.data(), const_cast<const void* const*>(table),
                                 CUDA_R_16BF, lda.data(),
                                 const_cast<const void* const*>(table + num_experts), CUDA_R_16BF,
                                 ldb.data(), beta.data(), table + 2 * num_experts, y_type,
                                 ldc.data(), groups, group_size.data(), CUBLAS_COMPUTE_32F),
      "MoeGroupedGemm cublasGemmGroupedBatchedEx");
  // The host arrays must outlive the enqueue only; cuBLAS reads them during the call.
  return absl::OkStatus();
}

template <typename OutT>
absl::Status PerExpertLoop(cublasHandle_t handle, const uint16_t* x_perm, const int32_t* offsets,
                           int num_experts, const uint16_t* w, int64_t n, int64_t k, OutT* y,
                           cudaStream_t stream) {
  for (int e = 0; e < num_experts; ++e) {
    const int rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    absl::Status status = GemmBf16(handle, x_perm + static_cast<int64_t>(offsets[e]) * k, rows, k,
                                   k, w + static_cast<int64_t>(e) * n * k, n,
                                   y + static_cast<int64_t>(offsets[e]) * n, n, stream);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

template <typename OutT>
absl::Status Grouped(cublasHandle_t handle, const uint16_t* x_perm, const int32_t* offsets,
                     int num_experts, const uint16_t* w, int64_t n, int64_t k, OutT* y,
                     GroupedGemmMode mode, void* workspace, int64_t workspace_bytes,
                     GroupedGemmMode* used, cudaStream_t stream) {
  if (num_experts <= 0 || n <= 0 || k <= 0 || n > 0x7fffffff || k > 0x7fffffff ||
      offsets == nullptr) {
    return absl::InvalidArgumentError("MoeGroupedGemm: bad shape");
  }
  for (int e = 0; e < num_experts; ++e) {
    if (offsets[e + 1] < offsets[e] || offsets[0] != 0) {
      return absl::InvalidArgumentError("MoeGroupedGemm: offsets not ascending from 0");
    }
  }
  constexpr bool kF32 = sizeof(OutT) == 4;
  if (mode != GroupedGemmMode::kPerExpertLoop) {
    absl::Status status = GroupedBatched(handle, x_perm, offsets, num_experts, w, n, k, y,
                                         kF32 ? CUDA_R_32F : CUDA_R_16BF, sizeof(OutT), workspace,
                                         workspace_bytes, stream);
    if (status.ok() || mode == GroupedGemmMode::kGroupedBatched) {
      if (used != nullptr) *used = GroupedGemmMode::kGroupedBatched;
      return status;
    }
  }
  if (used != nullptr) *used = GroupedGemmMode::kPerExpertLoop;
  return PerExpertLoop(handle, x_perm, offsets, num_experts, w, n, k, y, stream);
}

}  // namespace

int64_t MoePermuteWorkspaceBytes(int num_experts) {
  return 2 * static_cast<int64_t>(std::max(num_experts, 0)) * sizeof(int32_t);
}

absl::Status MoePermute(const int32_t* expert_ids, int64_t tokens, int top_k, int num_experts,
                        void* workspace, int64_t workspace_bytes, int32_t* expert_offsets,
                        int32_t* permuted_token, int32_t* pair_row, cudaStream_t stream,
                        const MoePermuteOptions& options) {
  if (tokens < 0 || top_k <= 0 || num_experts <= 0 || tokens * top_k > 0x7fffffff) {
    return absl::InvalidArgumentError(
        "MoePermute: needs tokens >= 0, top_k >= 1, num_experts >= 1, tokens·top_k < 2^31");
  }
  if (options.local_of != nullptr && options.id_space <= 0) {
    return absl::InvalidArgumentError("MoePermute: local_of needs id_space >= 1");
  }
  const PairExpert expert_of{expert_ids,       top_k,           num_experts, options.live_tokens,
                             options.local_of, options.id_space};
  const int64_t pairs = tokens * top_k;
  if (pairs <= kMoePermuteOneLaunchPairs && num_experts <= kOneLaunchExperts) {
    internal::LaunchKernel(PermuteOneLaunchKernel, 1, kOneLaunchThreads, 0, stream, expert_of,
                           tokens, expert_offsets, permuted_token, pair_row);
    return LaunchStatus("MoePermute PermuteOneLaunchKernel launch");
  }
  if (workspace_bytes < MoePermuteWorkspaceBytes(num_experts) || workspace == nullptr) {
    return absl::InvalidArgumentError("MoePermute: workspace below MoePermuteWorkspaceBytes(E)");
  }
  int32_t* counts = static_cast<int32_t*>(workspace);
  int32_t* cursors = counts + num_experts;
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(counts, 0, num_experts * sizeof(int32_t), stream),
                              "MoePermute memset");
  internal::LaunchKernel(CountKernel, GridFor(pairs), kThreads, 0, stream, expert_of, tokens,
                         counts, permuted_token);
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "MoePermute CountKernel launch");
  internal::LaunchKernel(ScanKernel, 1, 1, 0, stream, counts, num_experts, expert_offsets, cursors);
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "MoePermute ScanKernel launch");
  internal::LaunchKernel(PlaceKernel, GridFor(pairs), kThreads, 0, stream, expert_of, tokens,
                         cursors, permuted_token, pair_row);
  return LaunchStatus("MoePermute PlaceKernel launch");
}

absl::Status MoeGatherRows(const uint16_t* x, const int32_t* permuted_token, int64_t rows,
                           int64_t dim, uint16_t* x_perm, cudaStream_t stream) {
  if (rows < 0 || dim <= 0) return absl::InvalidArgumentError("MoeGatherRows: bad shape");
  if (rows == 0) return absl::OkStatus();
  internal::LaunchKernel(GatherKernel, GridFor(rows * dim / 8 + 1), kThreads, 0, stream, x,
                         permuted_token, rows, dim, x_perm);
  return LaunchStatus("MoeGatherRows GatherKernel launch");
}

int64_t MoeGroupedGemmWorkspaceBytes(int num_experts) {
  return 3 * static_cast<int64_t>(std::max(num_experts, 0)) * sizeof(void*);
}

absl::Status MoeGroupedGemm(cublasHandle_t handle, const uint16_t* x_perm,
                            const int32_t* host_offsets, int num_experts, const uint16_t* w,
                            int64_t n, int64_t k, float* y_perm, GroupedGemmMode mode,
                            void* workspace, int64_t workspace_bytes, GroupedGemmMode* used,
                            cudaStream_t stream) {
  return Grouped(handle, x_perm, host_offsets, num_experts, w, n, k, y_perm, mode, workspace,
                 workspace_bytes, used, stream);
}

absl::Status MoeGroupedGemm(cublasHandle_t handle, const uint16_t* x_perm,
                            const int32_t* host_offsets, int num_experts, const uint16_t* w,
                            int64_t n, int64_t k, uint16_t* y_perm, GroupedGemmMode mode,
                            void* workspace, int64_t workspace_bytes, GroupedGemmMode* used,
                            cudaStream_t stream) {
  return Grouped(handle, x_perm, host_offsets, num_experts, w, n, k, y_perm, mode, workspace,
                 workspace_bytes, used, stream);
}

absl::Status MoeCombine(const float* y_perm, const int32_t* pair_row, const float* weights,
                        int64_t tokens, int top_k, int64_t dim, float* out, cudaStream_t stream,
                        bool accumulate) {
  if (tokens < 0 || top_k <= 0 || dim <= 0) {
    return absl::InvalidArgumentError("MoeCombine: bad shape");
  }
  if (tokens == 0) return absl::OkStatus();
  internal::LaunchKernel(CombineKernel, GridFor(tokens * dim), kThreads, 0, stream, y_perm,
                         pair_row, weights, tokens, top_k, dim, accumulate, out);
  return LaunchStatus("MoeCombine CombineKernel launch");
}

}  // namespace strata::kernels::cuda
