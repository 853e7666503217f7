// MLA prefill in the non-absorbed ("MHA") form (docs/model.md §4.2) over the paged latent cache,
// plus the elementwise output gate (§4.5). Hopper (sm_90a) tensor cores through mma.sync.
//
// Fixed dims as in mla_decode.h: latent row κ = [c (512) ; k_pe (64)] bf16 in pages
// [num_blocks, 64, 576]; kv_b_proj W_kvb [H·256, 512] bf16, rows of head h =
// [W_UK,h (128) ; W_UV,h (128)]; q [T, H, 192] bf16 per head [q_nope (128) ; q_pe (64)];
// v_head_dim 128; output o [T, H·128] (before o_proj).
//
// Varlen + chunked prefill over a batch of `num_seqs` sequences (device int32 arrays):
//   cu_seqlens_q [num_seqs + 1]  prefix sums of the NEW token counts: the new tokens of
//                                sequence b are rows cu_seqlens_q[b] .. cu_seqlens_q[b+1) of
//                                q / gate / out; cu_seqlens_q[0] = 0, cu_seqlens_q[num_seqs] = T.
//   cu_seqlens_k [num_seqs + 1]  prefix sums of the CONTEXT lengths C_b = num_computed_b + new_b
//                                (the new tokens' latent rows are already in the cache, as the
//                                last new_b of the C_b rows); cu_seqlens_k[num_seqs] =
//                                total_context. Requires C_b ≥ new_b (rows of a sequence that
//                                breaks this are left unwritten).
//   block_table  [num_seqs, max_blocks_per_seq]: page p of sequence b is block_table[b][p].
// New token i of sequence b sits at position num_computed_b + i and attends causally to context
// positions [0, num_computed_b + i].
//
// Two stages (MlaPrefillMha runs both on `stream`):
//   1. MlaPrefillExpand: a gather kernel copies every context row from its page into a dense
//      bf16 buffer L [total_context, 576] (sequence b at rows cu_seqlens_k[b]..), then one
//      cuBLAS GEMM (GemmBf16) expands it: KV [total_context, H, 256] = L[:, :512] · W_kvbᵀ,
//      per row and head [k_nope (128) ; v (128)], rounded to bf16. K = [k_nope ; k_pe], k_pe
//      read from L (shared by all heads).
//   2. MlaPrefillAttention: flash attention on tensor cores (mma.sync m16n8k16 bf16, f32
//      accumulate): a CTA = 64 queries of one (sequence, head), 4 warps × 16 query rows, key
//      tiles of 64 double-buffered through shared memory with cp.async, Q fragments held in
//      registers, online softmax in the log2 domain with P rounded to bf16 (kept in registers
//      as the A operand of P·V), causal + length masks only on the tiles that need them.
//      Epilogue: o = O / l, then o ← σ(g)·o when a gate is given.
// Workspace (MlaPrefillWorkspaceBytes): total_context · (576 + 256·H) · 2 bytes (each part
// padded to 256 B): e.g. 4096 context rows at H = 32 → 68.5 MiB, at H = 96 → 196.5 MiB. It
// grows with the WHOLE context (prefix included) unless the context is chunked:
//
// Context chunking (params.max_context_chunk = W, 0 < W < total_context; MlaPrefillMha only —
// the two stages alone reject it): the concatenated context [0, total_context) is walked in
// windows of W rows. Per window: a gather kernel (one warp per row, sequence found by binary
// search of cu_seqlens_k) fills L [W, 576], one GEMM expands KV [W, H, 256], and the attention
// kernel (same tiles) attends each (query, head) to the keys of its sequence inside the window,
// merging its unnormalised partial (O, running max, l) into f32 accumulators O_acc [T, H, 128]
// and (m, l) [T, H, 2] by the log-sum-exp rule (a query that sees no key of the window adds
// nothing). A last kernel writes o = σ(g) · O_acc / l. Workspace then is
// W · (576 + 256·H) · 2 + T · H · (128 + 2) · 4 bytes, independent of total_context: e.g. W =
// 8192, H = 96, T = 2048 → 393 MiB + 97.5 MiB. Each window costs three launches and re-reads the
// queries, so W should stay in the thousands. W = 0 or W ≥ total_context: one window over the
// whole context, exactly the unchunked path above.
// Numerics: K_nope, V and P are rounded to bf16 (f32 accumulation everywhere). Chunked, P is
// rounded relative to the running max within the window, so results differ from the unchunked
// path by that rounding only (≈ 1e-3 relative); the merge itself is f32.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "core/latent_row.h"

namespace strata::kernels::cuda {

inline constexpr int kMlaQkNopeDim = 128;                                // dn
inline constexpr int kMlaQkHeadDim = kMlaQkNopeDim + 64;                 // dn + dr = 192
inline constexpr int kMlaVHeadDim = 128;                                 // dv
inline constexpr int kMlaKvbRowsPerHead = kMlaQkNopeDim + kMlaVHeadDim;  // 256

struct MlaPrefillParams {
  int num_seqs = 0;            // sequences in the batch, ≤ 65535 (grid limit)
  int num_heads = 0;           // H, ≤ 65535
  int max_blocks_per_seq = 0;  // row stride of block_table (≥ 1)
  int max_context = 0;         // host upper bound of every C_b (≤ max_blocks_per_seq · 64)
  int max_new = 0;             // host upper bound of every new_b (sizes the query-tile grid)
  int64_t total_context = 0;   // = cu_seqlens_k[num_seqs]: rows of the expanded scratch
  int64_t total_new = 0;       // = cu_seqlens_q[num_seqs] = T: rows of q, gate and out
  float scale = 0.0f;          // softmax scale ((dn + dr)^-1/2 = 192^-1/2 for Kimi)
  // Rows of the dense expansion per context window (see "Context chunking"); 0 = the whole
  // context in one pass. ≥ 0.
  int64_t max_context_chunk = 0;
  // kv_cache rows: bf16, or fp8 (core/latent_row.h) dequantized to bf16 as they are gathered.
  LatentDType cache_dtype = LatentDType::kBF16;
};

// Bytes of workspace MlaPrefillExpand / MlaPrefillAttention / MlaPrefillMha need.
int64_t MlaPrefillWorkspaceBytes(const MlaPrefillParams& params);

// A max_context_chunk for MlaPrefillMha within `budget_bytes` of workspace (params'
// max_context_chunk ignored): 0 when the whole context fits unchunked, else the largest multiple
// of 64 whose MlaPrefillWorkspaceBytes ≤ budget_bytes, or -1 when not even 64-row windows fit
// (the f32 accumulators alone take total_new · H · 520 bytes).
int64_t MlaPrefillContextChunkFor(const MlaPrefillParams& params, int64_t budget_bytes);

// Stage 1: gather the context rows from the pages and expand them through W_kvb into
// `workspace` (layout private to this file; MlaPrefillAttention reads it). Both stages cover the
// whole context: params with 0 < max_context_chunk < total_context are InvalidArgument here.
absl::Status MlaPrefillExpand(cublasHandle_t handle, const void* kv_cache,
                              const int32_t* block_table, const int32_t* cu_seqlens_k,
                              const uint16_t* w_kvb, const MlaPrefillParams& params,
                              void* workspace, int64_t workspace_bytes, cudaStream_t stream);

// Stage 2: causal attention of the new tokens over the expanded context in `workspace`.
// gate: [T, H·128] f32 gate logits (before the sigmoid) or nullptr (no gate).
// out: [T, H·128], f32 or bf16 bits.
absl::Status MlaPrefillAttention(const uint16_t* q, const int32_t* cu_seqlens_q,
                                 const int32_t* cu_seqlens_k, const float* gate,
                                 const MlaPrefillParams& params, const void* workspace,
                                 int64_t workspace_bytes, float* out, cudaStream_t stream);
absl::Status MlaPrefillAttention(const uint16_t* q, const int32_t* cu_seqlens_q,
                                 const int32_t* cu_seqlens_k, const float* gate,
                                 const MlaPrefillParams& params, const void* workspace,
                                 int64_t workspace_bytes, uint16_t* out, cudaStream_t stream);

// Both stages: out = gated non-absorbed causal MLA attention of the new tokens, over context
// windows when 0 < params.max_context_chunk < total_context (see "Context chunking"). Rows of a
// sequence with C_b < new_b are left unwritten in both modes.
absl::Status MlaPrefillMha(cublasHandle_t handle, const uint16_t* q, const void* kv_cache,
                           const int32_t* block_table, const int32_t* cu_seqlens_q,
                           const int32_t* cu_seqlens_k, const uint16_t* w_kvb, const float* gate,
                           const MlaPrefillParams& params, void* workspace, int64_t workspace_bytes,
                           float* out, cudaStream_t stream);
absl::Status MlaPrefillMha(cublasHandle_t handle, const uint16_t* q, const void* kv_cache,
                           const int32_t* block_table, const int32_t* cu_seqlens_q,
                           const int32_t* cu_seqlens_k, const uint16_t* w_kvb, const float* gate,
                           const MlaPrefillParams& params, void* workspace, int64_t workspace_bytes,
                           uint16_t* out, cudaStream_t stream);

// o ← σ(g) ⊙ o in place, elementwise over [rows, width] f32 (the decode path's output gate after
// MlaApplyValueProjection: width = H·dv). rows == 0 is a no-op.
absl::Status MlaOutputGate(float* o, const float* gate, int64_t rows, int64_t width,
                           cudaStream_t stream);

}  // namespace strata::kernels::cuda
