// MLA prefill attention on the CPU (docs/model.md §4): a chunk of T new tokens on top of C cached
// tokens per sequence, causal, a batch of sequences, reading the latent rows in place from the
// paged cache (mla_paged.h; the chunk's own rows must already be written there).
//
// Two forms, both flash-attention style (online softmax over 16-row context tiles with per-query
// causal limits; never a T × (C+T) score matrix):
//   absorbed ("MQA", docs/model.md §4.3): work items (sequence, ≤ 4 heads, 16 tokens) absorb
//     their queries (q̃ = [W_UKᵀ q_nope ; q_pe]), attend the 576-wide latent rows in place,
//     normalise, up-project with W_UV,h and gate. 2·(576 + 512) FLOPs per (query, row).
//   expanded ("MHA", §4.2): work items (sequence, head) expand [k_nope ; k_pe ; v] of 256
//     context rows at a time with kv_b_proj (2·256·512 FLOPs per row and head, reused by all T
//     queries of the head), then attend them: 2·(192 + 128) FLOPs per (query, row). In f32 the
//     attention runs on lane tiles (mla_tiles.h LaneBlock: 32 queries one per vector lane); when
//     the batch has fewer (sequence, head) items than twice the threads, a sequence's heads run
//     one after another with the threads sharing each head's rows and query groups (same
//     outputs bit for bit — the long-context model has one head).
// kAuto picks the form with fewer FLOPs for the chunk (MlaPrefillChooseForm): absorbing T
// queries costs as much as expanding T rows, so expanded wins whenever the cached context C is
// small next to T, and absorbed only for short chunks after a long context (at model shapes,
// C ≫ T: T below ~170; ~60 with bf16 products).
//
// Numerics: f32; query (t, h) always sees context tiles starting at row 0 in the same order, so
// for a given form its output does not depend on the batch, on the chunking of the prompt or on
// the thread count (on one ISA path). The form depends only on the sequence's own (C, T).
// Under MatmulPrecision::kBf16 (or kInt8) on an AMX CPU the expanded form runs its products on
// AMX tiles with q, k, v and the softmax weights rounded to bf16 (internal/mla_prefill_amx.h;
// ~2⁻⁸ relative error), with the same invariances.
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

struct MlaPrefillSequence {
  PagedLatent context;          // C + T rows; the T new tokens are the last T
  int64_t num_new_tokens = 0;   // T ≥ 1
  const float* q = nullptr;     // [T, H, dn + dr]
  const float* gate = nullptr;  // [T, H·dv] gate logits (before the sigmoid), or nullptr
  float* o = nullptr;           // [T, H·dv] output (before o_proj)
};

enum class MlaPrefillForm { kAuto, kAbsorbed, kExpanded };

// The form kAuto uses for a chunk of `num_new` tokens after `num_cached` cached ones, the
// expanded form's FLOPs running `expanded_speedup` times as fast as the absorbed form's (1 in
// f32; 2 with bf16 products, whose expanded form runs them: measured 2.1–2.9× on vdpbf16ps).
MlaPrefillForm MlaPrefillChooseForm(const MlaDims& dims, int64_t num_cached, int64_t num_new,
                                    double expanded_speedup = 1.0);

size_t MlaPrefillScratchBytes(const MlaDims& dims, absl::Span<const MlaPrefillSequence> seqs);

// Writes every seqs[i].o; `w_kvb` as in MlaDecode; `scratch`: MlaPrefillScratchBytes bytes,
// 64-byte aligned. Per-thread tile buffers are thread-local and only grow.
void MlaPrefill(const MlaDims& dims, float scale, const MatmulWeights& w_kvb,
                absl::Span<const MlaPrefillSequence> seqs, void* scratch,
                MlaPrefillForm form = MlaPrefillForm::kAuto);

}  // namespace strata::kernels::cpu
