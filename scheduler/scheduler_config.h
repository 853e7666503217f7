// SchedulerConfig: the knobs of continuous batching on one data-parallel rank. Pool sizes
// (num_blocks, num_slots, num_checkpoint_slots) normally come from the memory planner
// (kvcache/memory_planner.h); the rest from server flags.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace strata::scheduler {

// Admission order of waiting requests (and, reversed, the preemption order of running ones).
enum class Policy : uint8_t {
  kFcfs,      // arrival order; Request::priority is ignored
  kPriority,  // lower Request::priority first, then arrival order (vLLM semantics)
};

const char* PolicyName(Policy policy);

inline constexpr int kMaxSpeculativeTokens = 16;
inline constexpr int kMaxPromptLookup = 64;
// Longest pause (eligible steps without a draft) after drafts that were rejected outright.
inline constexpr int kMaxDraftPause = 16;

struct SchedulerConfig {
  int32_t max_num_seqs = 64;              // running sequences at once
  int64_t max_num_batched_tokens = 2048;  // token budget of one step (prefill + decode)
  int64_t max_model_len = 0;              // prompt + max_tokens of one request, at most
  int block_size = 64;                    // tokens per MLA latent page
  int32_t num_blocks = 0;                 // MLA latent pages
  int32_t num_slots = 0;                  // live KDA state slots (unused without KDA layers)
  int32_t num_checkpoint_slots = 0;       // KDA checkpoint slots for prefix caching
  int checkpoint_every_n_blocks = 16;     // a checkpoint every N blocks (0: prompt ends only)
  // Of one sequence's every-N-blocks checkpoints, the latest this many age normally in the
  // checkpoint LRU; older ones are moved to its cold end (evicted first unless a hit touches
  // them), and a chunk reserves at most this many. So one long prompt cannot evict every
  // other conversation's checkpoints. Prompt-end checkpoints do not count. 0: no limit.
  int stride_checkpoints_per_sequence = 2;
  bool has_kda_layers = true;  // false: no state slots, no checkpoints
  bool enable_prefix_caching = true;
  Policy policy = Policy::kFcfs;
  // > 0: at most this many prefill tokens per sequence per step, so one long prompt cannot
  // take the whole budget from the other prefills; 0: off.
  int64_t long_prefill_token_threshold = 0;
  // > 1: a chunk that leaves tokens of its sequence for later steps ends at a multiple of this
  // many tokens from the sequence's start — shortened to the last such point within what the
  // step's budgets allow; where none is within them the sequence waits for a step that reaches
  // one (never forever: where the static caps — max_num_batched_tokens,
  // long_prefill_token_threshold, max_scored_tokens_per_step — are below the alignment, the
  // budget's cut stands and the next chunk returns to the grid, as does the first after a
  // prefix hit off the grid). The CUDA
  // engine's executor gives a prompt split there the whole prompt's result bit for bit (its KDA
  // prefill runs 16-token chunks counted from a piece's start; engine/cuda/README.md), so where
  // the pacer or the budget cut a prompt no longer shows in its output. 0 or 1: off. (The CPU
  // executor is not split-invariant either, only less visibly: on the demo model a 3,000-token
  // prompt cut at 1,024, 1,920, 1,984 or 2,048 tokens gives the unsplit log-probabilities bit for
  // bit, cut every 1,000 tokens they differ by ~1e-4; a KDA checkpoint saved inside a chunk is
  // likewise not bit-equal to the state at the end of a chunk cut there.)
  int prefill_chunk_alignment = 0;
  // Prompt positions scored (Request::prompt_logprobs) per step, over all sequences: each
  // scored position needs a whole logits row (vocab floats) at once.
  int64_t max_scored_tokens_per_step = 256;
  // Speculative decoding by prompt lookup (vLLM's "ngram" method; ngram_proposer.h): a
  // decoding sequence proposes up to num_speculative_tokens tokens that followed an earlier
  // occurrence of its last n tokens, n in [prompt_lookup_min, prompt_lookup_max], and the step
  // verifies them at once. 0: off.
  int num_speculative_tokens = 0;
  int prompt_lookup_min = 2;
  int prompt_lookup_max = 5;
  // > 0: no drafts in a step with at least this many running sequences, this step's admissions
  // included (vLLM's disable_by_batch_size): a large batch already keeps the weights busy, and
  // drafts there cost more than they save.
  int32_t speculative_disable_by_batch_size = 0;
  // Offload tiers (Scheduler::SetOffloadTiers): bytes of tier loads one step carries, at most
  // (at least one unit, so a load always moves). A prefix hit with more loads than that is
  // admitted and loads over several steps before it computes, so the other sequences' steps
  // never wait for more than this many bytes of copies. (A hit that starts from a KDA
  // checkpoint on the device loads in one step: the checkpoint's copy must be in the step that
  // takes it.)
  int64_t max_tier_load_bytes_per_step = int64_t{256} << 20;

  // InvalidArgument naming the field and its limit. Besides ranges it requires
  // max_num_batched_tokens >= max_num_seqs (every running sequence can decode in one step)
  // and num_blocks * block_size >= max_model_len (a sequence alone always fits, so
  // preemption always makes progress); num_speculative_tokens in [0, kMaxSpeculativeTokens],
  // 1 <= prompt_lookup_min <= prompt_lookup_max <= kMaxPromptLookup.
  absl::Status Validate() const;
};

}  // namespace strata::scheduler
