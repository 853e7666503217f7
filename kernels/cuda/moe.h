// MoE expert execution on the GPU (docs/model.md §6.2): permute the (token, slot) pairs by expert,
// gather their rows, run every expert's matrix product as one grouped GEMM (cuBLAS), and
// combine the weighted expert outputs back per token.
//
//   MoePermute     expert_ids [T, k] → expert_offsets [E+1] (rows of expert e are
//                  [offsets[e], offsets[e+1]) of the permuted order), permuted_token [T·k]
//                  (source token of each permuted row), pair_row [T·k] (permuted row of pair
//                  (t, i)). Counting sort with atomics: the order of rows WITHIN an expert is
//                  unspecified, which no result depends on (each row is computed on its own and
//                  MoeCombine sums in (t, i) order). Ids outside [0, E) are dropped
//                  (pair_row = −1). Padding tokens and tensor parallelism's id mapping are
//                  folded in (MoePermuteOptions); decode-sized batches take one launch.
//   MoeGatherRows  x_perm[r] = x[permuted_token[r]] (bf16 rows; Strata's grouped GEMM gathers
//                  in its load path instead, grouped_gemm.h GroupedGemmRows)
//   MoeGroupedGemm y_perm[r] = x_perm[r] · W_eᵀ for r in expert e's range; W [E, n, k] bf16.
//                  Needs the offsets on the host (one device→host copy per layer).
//   MoeCombine     out[t] = Σ_i weights[t, i] · y_perm[pair_row[t, i]]   (f32, i ascending);
//                  with `accumulate`, out[t] += that sum (the shared expert's output already in
//                  out: one pass instead of a combine and an add)
// A SwiGLU/SiTU expert is MoeGroupedGemm(gate|up, n = 2·I) → Glu (norm.h, in_stride 2·I) →
// MoeGroupedGemm(down); the activation is a separate pass (not fused into cuBLAS's epilogue).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace strata::kernels::cuda {

// Workspace bytes of MoePermute (two int32 counters per expert).
int64_t MoePermuteWorkspaceBytes(int num_experts);

// What MoePermute folds into its own launches instead of a kernel each (all optional).
struct MoePermuteOptions {
  // Device int: pairs of tokens t ≥ *live_tokens route nowhere (the padding rows of a
  // graph-replayed step), as if their ids were −1. Null: every token is live.
  const int32_t* live_tokens = nullptr;
  // Tensor parallelism (engine/tensor_parallel.h: each rank runs its share of the routed experts
  // on every token): ids in [0, id_space) become local_of[id] (this rank's index of the expert,
  // or −1 when another rank runs it), any other id −1; the mapped ids are what is grouped
  // (num_experts = this rank's count). Null: ids are used as they are.
  const int32_t* local_of = nullptr;
  int id_space = 0;
};

// Pairs up to this many (decode batches and short prefills) with up to 4,096 experts are
// permuted by ONE launch (one CTA: shared-memory counters, block scan, placement); more take four
// (memset, count, scan, place).
inline constexpr int64_t kMoePermuteOneLaunchPairs = 16384;

// Also writes permuted_token[r] = 0 for the rows r in [offsets[E], tokens·top_k) that dropped
// pairs leave (so a gather over every row reads token 0 there); `expert_ids` is not modified.
absl::Status MoePermute(const int32_t* expert_ids, int64_t tokens, int top_k, int num_experts,
                        void* workspace, int64_t workspace_bytes, int32_t* expert_offsets,
                        int32_t* permuted_token, int32_t* pair_row, cudaStream_t stream,
                        const MoePermuteOptions& options = {});

absl::Status MoeGatherRows(const uint16_t* x, const int32_t* permuted_token, int64_t rows,
                           int64_t dim, uint16_t* x_perm, cudaStream_t stream);

enum class GroupedGemmMode {
  kAuto,            // cublasGemmGroupedBatchedEx; kPerExpertLoop if cuBLAS refuses it
  kGroupedBatched,  // one cublasGemmGroupedBatchedEx call for all non-empty experts
  kPerExpertLoop,   // one cublasGemmEx per non-empty expert
};

// Device workspace bytes of MoeGroupedGemm (pointer tables) for `num_experts`.
int64_t MoeGroupedGemmWorkspaceBytes(int num_experts);

// host_offsets [E+1] on the host. `used` (may be null) receives the path that ran.
absl::Status MoeGroupedGemm(cublasHandle_t handle, const uint16_t* x_perm,
                            const int32_t* host_offsets, int num_experts, const uint16_t* w,
                            int64_t n, int64_t k, float* y_perm, GroupedGemmMode mode,
                            void* workspace, int64_t workspace_bytes, GroupedGemmMode* used,
                            cudaStream_t stream);
absl::Status MoeGroupedGemm(cublasHandle_t handle, const uint16_t* x_perm,
                            const int32_t* host_offsets, int num_experts, const uint16_t* w,
                            int64_t n, int64_t k, uint16_t* y_perm, GroupedGemmMode mode,
                            void* workspace, int64_t workspace_bytes, GroupedGemmMode* used,
                            cudaStream_t stream);

absl::Status MoeCombine(const float* y_perm, const int32_t* pair_row, const float* weights,
                        int64_t tokens, int top_k, int64_t dim, float* out, cudaStream_t stream,
                        bool accumulate = false);

}  // namespace strata::kernels::cuda
