// What one forward pass runs: a ragged batch of sequences, each contributing a run of new
// tokens (a prefill chunk or one decode token) on top of the context already in its caches.
//
// Token rows of all sequences are concatenated: sequence i owns rows
// [row_offset_i, row_offset_i + num_new_tokens_i) of every [num_rows, ·] activation. Weights
// are applied once to all rows; mixers (KDA, MLA) run per sequence on their own caches.
//
// Cache views (the caller owns the memory; layouts in engine/cache_layout.h):
//   KDA layer j (j-th KDA layer in depth order):
//     kda_state[j]  [H, D, D] f32 recurrent state S (key channel major); zeros for a new sequence
//     kda_conv[j]   [3, K-1, P] f32 last K-1 pre-conv inputs of q, k, v (oldest first)
//   MLA layer j:
//     mla_pages[j]  [num_blocks, block_size, latent row] page pool of that layer, rows in
//                   latent_dtype's format (core/latent_row.h: f32, bf16 or fp8); row of token
//                   position t: block_table[t / block_size] * block_size + t % block_size
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "core/latent_row.h"

namespace strata::engine {

enum class LogitsMode : uint8_t {
  kNone,  // an intermediate prefill chunk: nothing is sampled
  kLast,  // the last num_last_logits new tokens (generation; several to verify drafts)
  kAll,   // every new token (scoring, `strata logits`)
};

struct SequenceCacheView {
  std::vector<float*> kda_state;
  std::vector<float*> kda_conv;
  std::vector<std::byte*> mla_pages;
  LatentDType latent_dtype = LatentDType::kF32;
  int rope_dim = 0;                      // the latent rows' rope part (bf16 / fp8 layouts)
  const int32_t* block_table = nullptr;  // covers positions [0, num_computed + num_new)
  int block_size = 0;
};

// A KDA checkpoint the forward writes: every KDA layer j copies its caches, as the sequence's
// first num_tokens new tokens leave them, to kda_state[j] / kda_conv[j] (same shapes as the
// cache views; another row of the caller's arena).
struct KdaCacheSave {
  int64_t num_tokens = 0;  // 1..num_new_tokens
  std::vector<float*> kda_state;
  std::vector<float*> kda_conv;
};

// Rows that replace the token embeddings of some of a sequence's new tokens (an image's rows at
// its placeholder positions, engine/media_embedding.h): new tokens [first, first + num_rows)
// take rows [0, num_rows) of `rows` instead of their ids' embeddings.
struct EmbeddingRows {
  int64_t first = 0;
  int64_t num_rows = 0;
  const float* rows = nullptr;  // [num_rows, hidden_size] f32
};

struct ForwardSequence {
  const int32_t* token_ids = nullptr;  // [num_new_tokens]
  int64_t num_new_tokens = 0;
  int64_t num_computed_tokens = 0;  // tokens already in the caches (their position offset)
  SequenceCacheView cache;
  LogitsMode logits = LogitsMode::kLast;
  int64_t num_last_logits = 1;  // with kLast: rows of the last min(n, num_new_tokens) tokens
  // ≥ 0: the new tokens end in speculative drafts. KDA layers keep the projected rows at rows
  // [kda_draft_row, + num_new_tokens) of ForwardContext::kda_drafts, from which
  // Model::ReplayKdaDrafts advances the caches by the tokens the sampler kept
  // (engine/kda_drafts.h), and leave the caches as they were — unless kda_update_caches, when
  // the caller keeps a copy of them from before the step to restore and replay from if a draft
  // is rejected. MLA rows are written as usual: those of rejected drafts lie past the kept
  // tokens and are overwritten later.
  int64_t kda_draft_row = -1;
  bool kda_update_caches = false;
  // Checkpoints of the KDA caches inside the new tokens, ascending num_tokens (none with
  // drafts). A save splits the sequence's KDA kernels there: the same arithmetic as a step
  // ending at the save and the next one starting from it.
  absl::Span<const KdaCacheSave> kda_saves;
  // Embedding rows given by the caller (images), ascending `first`, inside the new tokens.
  absl::Span<const EmbeddingRows> embeddings;
};

// A batch as the model sees it (a view: callers keep reusable storage, e.g. a vector that only
// grows, so building a step allocates nothing).
using ForwardBatch = absl::Span<const ForwardSequence>;

// Logits rows, in sequence order: kLast adds min(num_last_logits, num_new_tokens) rows, kAll
// num_new_tokens rows, kNone none.
int64_t NumLogitRows(ForwardBatch batch);

}  // namespace strata::engine
