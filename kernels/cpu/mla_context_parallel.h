// MLA attention when a sequence's latent cache is spread over C ranks by token position (decode
// context parallelism, docs/architecture.md "Parallelism"): rank d holds positions p ≡ d (mod C)
// at local rows p / C. Each rank attends the absorbed queries of every head of its group over
// its own rows (MlaPartialAttention), the partial results go back to the heads' ranks, and each
// merges the C partials of its heads exactly with their log-sum-exp weights
// (MlaMergePartials) — the softmax over the whole context, as if one rank held it.
//
//   partial over rows R:  ō_R = Σ_{j∈R} e^{s_j − m} c_j / Σ_{j∈R} e^{s_j − m},
//                         lse_R = m + log Σ_{j∈R} e^{s_j − m}       (s_j = scale · q̃ · κ_j)
//   merge:                ō = Σ_R e^{lse_R − L} ō_R,   L = log Σ_R e^{lse_R}
// A rank none of whose rows a query sees (its first position comes later) returns lse = −∞ and
// ō = 0, which the merge weights by 0.
//
// Numerics: f32, f32 accumulation; the merged ō equals the one-rank softmax up to rounding (the
// sums are taken in another order). Reference: kernels/reference/mla.h (absorbed), which the
// test compares against over odd shapes, strides and cache formats.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "kernels/cpu/mla_paged.h"

namespace strata::kernels::cpu {

// One sequence's queries against this rank's rows of its context.
struct MlaPartialSequence {
  PagedLatent local;           // local rows 0 .. local.num_tokens − 1 (row j: position j·C + d)
  int64_t first_position = 0;  // position of query row 0 (the sequence's computed tokens)
  int64_t num_rows = 0;        // queries: new tokens at first_position, first_position + 1, …
  const float* q = nullptr;    // [num_rows, heads, r + dr] absorbed queries
  float* partial = nullptr;    // [num_rows, heads, r + 1]: ō_R (r values), then lse_R
};

// This rank's part of the context: rows of positions ≡ `offset` (mod `stride`). `latent_dim` =
// r + dr, `rank` = r (the width of c). Rows of every sequence and head run in parallel.
void MlaPartialAttention(int heads, int latent_dim, int rank, float scale, int64_t stride,
                         int64_t offset, absl::Span<const MlaPartialSequence> seqs);

// Number of local rows (positions ≡ offset mod stride) among positions 0 .. num_positions − 1.
int64_t LocalRows(int64_t num_positions, int64_t stride, int64_t offset);

// out[i] (r values) = the merge of `parts` partials of item i: partials[p · n + i] is part p's
// [ō (r) ; lse] for item i, n = num_items.
void MlaMergePartials(const float* partials, int parts, int64_t num_items, int rank, float* out);

}  // namespace strata::kernels::cpu
