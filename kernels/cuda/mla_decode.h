// MLA paged decode, absorbed ("MQA") form (docs/model.md §4.3), over the FlashMLA page layout.
//
// Fixed dims (all released Kimi / DeepSeek MLA checkpoints): latent row κ = [c (512) ; k_pe (64)]
// = 576 bf16 values, value width 512, pages of 64 tokens:
//   kv_cache     [num_blocks, 64, 576] bf16 bits (kvcache/cache_layout.h, LatentDType::kBF16), or
//                [num_blocks, 64] fp8 rows of 656 bytes (LatentDType::kFP8, core/latent_row.h):
//                params.cache_dtype says which. An fp8 page is staged raw (cp.async) and
//                dequantized to bf16(code · scale) in shared memory, so the result equals the
//                kernel's over a bf16 cache holding those values, bit for bit.
//   block_table  [batch, max_blocks_per_seq] int32: page p of sequence b is block_table[b][p]
//   seq_lens     [batch] int32 ≥ 1: context length of sequence b INCLUDING the new token
//   q_abs        [batch, num_heads, 576] bf16: q̃_h = [W_UK,hᵀ q_nope,h ; q_pe,h]
//                (MlaAbsorbQuery below)
//   out          [batch, num_heads, 512]: ō_h = Σ_j softmax_j(scale · q̃_h·κ_j) c_j
// One query token per sequence; it attends to all seq_lens[b] rows (the new token's row must
// already be in the cache).
//
// Three kernels compute the same function:
//   wgmma (sm_90a)       warpgroup MMA on up to 48 heads a CTA, pages by bulk copy (TMA engine)
//                        into two mbarrier-tracked buffers, fp8 decoded into the A fragments
//                        (mla_decode_wgmma.h). Same partial results and merge as below.
//   MlaPagedDecode       tensor cores (mma.sync m16n8k16 bf16, f32 accumulate): a CTA holds 32
//                        heads of one sequence and walks a contiguous range of pages (split-K),
//                        double-buffering 64-token pages through shared memory with cp.async;
//                        P is rounded to bf16 for the P·V product. Partial results (ō, LSE per
//                        split) are merged by a second kernel. Needs workspace
//                        (MlaDecodeWorkspaceBytes).
//   MlaPagedDecodeSimple CUDA cores, f32 math, one CTA per (sequence, head), online softmax, no
//                        workspace. Slow (reads the cache once per head); the cross-check and a
//                        fallback.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "core/latent_row.h"

namespace strata::kernels::cuda {

inline constexpr int kMlaLatentDim = 576;
inline constexpr int kMlaValueDim = 512;
inline constexpr int kMlaRopeDim = 64;
inline constexpr int kMlaPageSize = 64;

// Which tensor-core kernel MlaPagedDecode (and Prefill / Partial) run. kAuto: wgmma on an sm_90
// device when STRATA_CUDA_WGMMA=1, mma.sync when =0; unset, the emulator runs wgmma and a GPU
// mma.sync (wgmma becomes the GPU default once a GPU run has verified it).
enum class MlaDecodeKernel { kAuto, kMmaSync, kWgmma };

struct MlaDecodeParams {
  int batch = 0;               // sequences (one query token each), ≤ 65535 (grid limit)
  int num_heads = 0;           // H
  int max_blocks_per_seq = 0;  // row stride of block_table
  int max_context = 0;         // host-side upper bound of seq_lens (sizes the split-K grid)
  float scale = 0.0f;          // softmax scale ((dn + dr)^-1/2 for Kimi)
  int num_splits = 0;          // 0: chosen from the shape and the SM count; else forced (≥ 1)
  LatentDType cache_dtype = LatentDType::kBF16;     // kv_cache rows: kBF16 or kFP8
  MlaDecodeKernel kernel = MlaDecodeKernel::kAuto;  // kWgmma without wgmma.h's device: an error
};

// Whether `params` run on the wgmma kernel on the current device.
bool MlaDecodeUsesWgmma(const MlaDecodeParams& params);

// Split count MlaPagedDecode will use for `params` on the current device.
int MlaDecodeNumSplits(const MlaDecodeParams& params);
// Bytes of workspace MlaPagedDecode needs (partial ō and LSE per split).
int64_t MlaDecodeWorkspaceBytes(const MlaDecodeParams& params);

absl::Status MlaPagedDecode(const uint16_t* q_abs, const void* kv_cache, const int32_t* block_table,
                            const int32_t* seq_lens, const MlaDecodeParams& params, void* workspace,
                            int64_t workspace_bytes, float* out, cudaStream_t stream);
absl::Status MlaPagedDecode(const uint16_t* q_abs, const void* kv_cache, const int32_t* block_table,
                            const int32_t* seq_lens, const MlaDecodeParams& params, void* workspace,
                            int64_t workspace_bytes, uint16_t* out, cudaStream_t stream);

// Prefill (and multi-token decode) on the same kernel: every new token is one "query" with its
// own causal length. params.batch = total new tokens; query b reads block-table row
// query_seq[b] (its sequence) and attends to that sequence's first seq_lens[b] rows (its
// position + 1; the new tokens' rows must already be in the cache). Absorbed form, so it
// costs (576 + 512)/(192 + 128) ≈ 3.4× the FLOPs of the non-absorbed MHA prefill and re-reads
// the prefix per query (from L2 mostly): correct and simple, not the fast long-prompt path.
absl::Status MlaPagedPrefill(const uint16_t* q_abs, const void* kv_cache,
                             const int32_t* block_table, const int32_t* query_seq,
                             const int32_t* seq_lens, const MlaDecodeParams& params,
                             void* workspace, int64_t workspace_bytes, uint16_t* out,
                             cudaStream_t stream);

// Decode context parallelism (engine/tensor_parallel.h): the attention of each query over the
// part of its context this rank's cache holds, left for MlaMergePartials to combine with the
// other ranks' parts. Same inputs as MlaPagedPrefill (query_seq may be null: query b reads
// table row b; seq_lens[b] ≥ 0 here: the rows of b's context on this rank, 0 when it holds
// none). partial [batch, H, 513] f32 per (query, head): ō (512) over those rows, then
// lse = ln Σ_j e^(scale · q̃·κ_j) (−∞, with ō = 0, when seq_lens[b] = 0). Workspace as
// MlaPagedDecode.
absl::Status MlaPagedPartial(const uint16_t* q_abs, const void* kv_cache,
                             const int32_t* block_table, const int32_t* query_seq,
                             const int32_t* seq_lens, const MlaDecodeParams& params,
                             void* workspace, int64_t workspace_bytes, float* partial,
                             cudaStream_t stream);

// out[i] (512 bf16 values) = the exact merge of `parts` partials of item i:
// Σ_p e^(lse_p − L) ō_p with L = ln Σ_p e^(lse_p), where partials[p · num_items + i] is part p's
// [ō (512) ; lse] row (MlaPagedPartial's layout, one part per rank of the group, items =
// query × head). An item no part saw (every lse −∞) is 0. f32 math.
absl::Status MlaMergePartials(const float* partials, int parts, int64_t num_items, uint16_t* out,
                              cudaStream_t stream);

absl::Status MlaPagedDecodeSimple(const uint16_t* q_abs, const void* kv_cache,
                                  const int32_t* block_table, const int32_t* seq_lens,
                                  const MlaDecodeParams& params, float* out, cudaStream_t stream);

// The projections around the absorbed core, through cuBLAS (strided-batched over heads).
// w_kvb: kv_b_proj [H·(dn + dv), 512] bf16, rows of head h = [W_UK,h (dn rows) ; W_UV,h (dv)].
struct MlaHeadDims {
  int num_heads = 0;
  int qk_nope_head_dim = 128;  // dn
  int v_head_dim = 128;        // dv
};

// q [batch, H, dn + 64] bf16 → q_abs [batch, H, 576] bf16: [W_UK,hᵀ q_nope,h ; q_pe,h].
absl::Status MlaAbsorbQuery(cublasHandle_t handle, const uint16_t* q, int batch,
                            const uint16_t* w_kvb, const MlaHeadDims& dims, uint16_t* q_abs,
                            cudaStream_t stream);
// o_lat [batch, H, 512] bf16 → o [batch, H·dv]: o_h = W_UV,h ō_h.
absl::Status MlaApplyValueProjection(cublasHandle_t handle, const uint16_t* o_lat, int batch,
                                     const uint16_t* w_kvb, const MlaHeadDims& dims, float* o,
                                     cudaStream_t stream);

}  // namespace strata::kernels::cuda
