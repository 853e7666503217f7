// On-device token sampling for a batch of logits rows [rows, vocab] f32, with the selection
// rules of engine/sampling.cc (Sampler::Sample / DrawFromBest in its full-sort form), applied in
// the same order:
//   1. logit bias (CSR per row, added in list order);
//   2. repetition penalty on every id of the row's penalty history (logit > 0: divided, else
//      multiplied);
//   3. presence / frequency penalty on the history ids with count > 0:
//      logit −= fma(count, freq, presence);
//   4. temperature ≤ 1e-5 → greedy argmax (lowest id on ties); else rank tokens by (logit
//      descending, id ascending), p_i = exp((x_i − x_max)/T) in f64, top-k keeps the best k,
//      top-p cuts at the first rank whose cumulative p_i/Σp reaches top_p, min-p cuts at the
//      first rank ≥ 1 with p_i < min_p (p_0 = 1), then draw = u·Σ_{kept} p_i walks the ranks
//      (the token where the running draw goes negative; the last kept one otherwise).
// The uniform u ∈ [0, 1) per row comes from the host (the engine's Rng), so a host computation
// gives the same token for the same u. Steps 1–3 modify `logits` in place, as the engine does.
//
// Exactness: identical f32 penalties and identical f64 operations in rank order, except that
// when more than kSamplingChunk tokens are kept (top-k off or > kSamplingChunk) the normaliser
// Σp is a block reduction (another summation order: ~1e-16 relative, which can only move a
// top-p cut or a draw that lies within that distance of a boundary). CUDA's f64 exp is within
// 1 ulp, as glibc's, so the same caveat applies at the ulp level. Logits must not be NaN.
//
// Design (correctness over speed): one CTA per row. Tokens are ranked in chunks of
// kSamplingChunk: the chunk's last key is found by a radix select on the 64-bit key
// (order-preserving logit bits, id) — 8 passes over the row — then the chunk is gathered and
// bitonic-sorted in shared memory. Usually one chunk suffices (top-k ≤ 1024, or a top-p / min-p
// cut inside the best 1024); flat distributions walk further chunks (slower, still exact), or,
// with max_ranked_chunks, hand the row back to the host. Penalties touch only the history ids
// (engine Sampler::penalized_ids: what a sequence has seen), not the whole row.
//
// RowLogprobs: log-probabilities of a raw (unpenalised) row, as engine/step_sampling.h defines
// them — log_z = log Σ exp(x) in f64, the chosen token's x − log_z, and the best n tokens by
// (logit descending, id ascending) with theirs. One CTA per row, the same ranking machinery.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace strata::kernels::cuda {

inline constexpr int kSamplingChunk = 1024;

// Per-row parameters (engine SamplingParams, validated by SamplingParams::Validate).
struct SamplingRowParams {
  float temperature = 1.0f;         // ≤ 1e-5: greedy
  int32_t top_k = 0;                // ≤ 0: off
  float top_p = 1.0f;               // (0, 1]; 1: off
  float min_p = 0.0f;               // [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // 1: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
};

// Device pointers. Optional arrays may be null (the step is skipped for every row).
struct SamplingInputs {
  float* logits = nullptr;                    // [rows, vocab], modified in place
  const SamplingRowParams* params = nullptr;  // [rows]
  const double* uniforms = nullptr;           // [rows] in [0, 1)
  // Penalty history (CSR, optional): per row the ids the penalties touch, each at most once —
  // the repetition penalty applies to every listed id (list prompt + output tokens), presence
  // / frequency where the id's count (times generated) is > 0. Ids outside [0, vocab) ignored.
  const int32_t* history_offsets = nullptr;  // [rows + 1] into history_ids / history_counts
  const int32_t* history_ids = nullptr;
  const int32_t* history_counts = nullptr;
  const int32_t* bias_offsets = nullptr;  // [rows + 1] into bias_ids/values, optional
  const int32_t* bias_ids = nullptr;      // ids outside [0, vocab) are ignored
  const float* bias_values = nullptr;
  // > 0: rank at most this many chunks of kSamplingChunk tokens per row; a row whose top-p /
  // min-p cut or draw lies further down gets kSampleOnHost instead of a token (the caller
  // samples it on the host with the same uniform). 0: walk as far as needed.
  int max_ranked_chunks = 0;
};

// The token of a row that went past max_ranked_chunks.
inline constexpr int32_t kSampleOnHost = -2;

// tokens [rows] int32 on the device: the token, kSampleOnHost (see max_ranked_chunks), or −1
// only on an internal inconsistency (a bug).
absl::Status SampleTokens(const SamplingInputs& in, int64_t rows, int64_t vocab, int32_t* tokens,
                          cudaStream_t stream);

// Which raw row RowLogprobs reads, which token was chosen for it, and how many best tokens.
struct LogprobRow {
  int32_t logits_row = 0;  // into LogprobInputs::logits
  int32_t token_row = 0;   // into LogprobInputs::tokens
  int32_t num_top = 0;     // best tokens wanted; clamped to max_top and vocab
};

// Device pointers.
struct LogprobInputs {
  const float* logits = nullptr;     // [*, vocab] raw rows (before bias and penalties)
  const int32_t* tokens = nullptr;   // chosen tokens; a negative one gets a NaN logprob
  const LogprobRow* rows = nullptr;  // [rows]
};

// Outputs, device pointers: token_logprob [rows]; top_ids / top_logprobs [rows, max_top],
// the first min(num_top, vocab) of a row written, best first.
struct LogprobOutputs {
  float* token_logprob = nullptr;
  int32_t* top_ids = nullptr;
  float* top_logprobs = nullptr;
};

// max_top ≤ kSamplingChunk.
absl::Status RowLogprobs(const LogprobInputs& in, int64_t rows, int64_t vocab, int max_top,
                         const LogprobOutputs& out, cudaStream_t stream);

}  // namespace strata::kernels::cuda
