// MLA decode attention on the CPU (docs/model.md §4.3, absorbed "MQA mode"): one new token per
// sequence, a batch of sequences with different context lengths, reading each sequence's latent
// rows in place from the paged cache (mla_paged.h).
//
//   q̃_h = [W_UK,hᵀ q_nope,h ; q_pe,h]                       (576 = r + dr wide, per head)
//   s_h(j) = scale · q̃_h · κ_j     ō_h = Σ_j softmax_j(s_h) c_j      o_h = W_UV,h ō_h (dv)
//   o_h ← o_h ⊙ sigmoid(g_h)        when gate logits are given (docs/model.md §4.5, K3)
//
// Flash-decoding: the context of each sequence is cut into splits of whole 16-row tiles; work
// items are (sequence, split), run in parallel (OpenMP); each keeps an online softmax for all
// heads and reads each latent row once for all of them (MQA: one shared 576-wide KV head).
// Partial results are merged with log-sum-exp weights, then up-projected per head by W_UV,h.
//
// Numerics: f32 throughout, f32 accumulation. The split boundaries depend only on the
// sequence's context length, and every value is computed by the same instruction sequence
// whatever else is in the batch and whatever the thread count: a sequence's output is
// bit-identical alone or in any batch (on one ISA path; AVX-512 and AVX2 differ by rounding).
// Exception, by design: over a bf16 cache on an AVX512-BF16 CPU the tiles multiply bf16 pairs
// (vdpbf16ps: q̃ and P rounded to bf16, rows read in place, twice the multiply-adds per
// instruction; mla_tiles_bf16_impl.h) — still batch- and thread-invariant, f32 accumulation.
//
// Thread-safety: may be called concurrently with distinct scratch buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/mla_paged.h"
#include "kernels/reference/mla.h"

namespace strata::kernels::cpu {

struct MlaDecodeSequence {
  PagedLatent context;          // num_tokens ≥ 1 rows, the new token's row included (last)
  const float* q = nullptr;     // [H, dn + dr]  per head [q_nope ; q_pe]
  const float* gate = nullptr;  // [H·dv] gate logits (before the sigmoid), or nullptr: no gate
  float* o = nullptr;           // [H·dv] output (before o_proj)
};

// Bytes of scratch MlaDecode needs for this batch (64-byte aligned regions inside).
size_t MlaDecodeScratchBytes(const MlaDims& dims, absl::Span<const MlaDecodeSequence> seqs);

// Writes every seqs[i].o. `w_kvb`: kv_b_proj [H·(dn + dv), r] (rows of head h: W_UK,h then
// W_UV,h), f32 or bf16 — bf16 rows are read in place and widened exactly, so the output is
// bit-identical to the f32 copy's (half the weight bytes per step). `scratch`:
// MlaDecodeScratchBytes(dims, seqs) bytes, 64-byte aligned.
void MlaDecode(const MlaDims& dims, float scale, const MatmulWeights& w_kvb,
               absl::Span<const MlaDecodeSequence> seqs, void* scratch);

// Rows per split for a context of `num_tokens` (a multiple of 16; exposed for tests/benches).
int64_t MlaDecodeSplitRows(int64_t num_tokens);

}  // namespace strata::kernels::cpu
