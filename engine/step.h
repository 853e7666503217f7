// The step contract between the scheduler and the executor (docs/architecture.md, "The step
// contract"): plain data only. The scheduler never calls the executor; the executor never sees
// requests, only a StepPlan, and answers with a StepResult.
//
// One step runs one forward over a ragged batch mixing prefill chunks and decode tokens.
// For every scheduled sequence the plan says which tokens to run on top of how much context,
// where its caches are (MLA block table, KDA state slot), how the slot starts (fresh, carried
// from the previous step, or copied from a prefix-cache checkpoint), which KDA checkpoints to
// save at which of its tokens, and whether to sample.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "engine/media_embedding.h"
#include "engine/sampling.h"
#include "kvcache/cache_layout.h"

namespace strata::engine {

using SequenceId = int64_t;

enum class SlotInit : uint8_t {
  kCarry,           // the slot already holds this sequence's state for num_computed_tokens
  kZero,            // a new (or recomputed) sequence: zero the state and conv cache first
  kFromCheckpoint,  // copy checkpoint `source_checkpoint` into the slot first (prefix hit)
};

// A KDA checkpoint saved by the step: the slot's state and conv cache as they are after the
// first num_tokens of the sequence's new tokens (1 ≤ num_tokens ≤ new tokens: a prefill chunk
// runs through its checkpoint boundaries, the executor saving each on the way).
struct CheckpointSave {
  int32_t checkpoint = -1;
  int64_t num_tokens = 0;
};

struct ScheduledSequence {
  SequenceId seq_id = 0;
  std::vector<int32_t> token_ids;    // the new tokens of this step (prefill chunk or 1 decode)
  int64_t num_computed_tokens = 0;   // tokens already in the caches (= position of token 0)
  std::vector<int32_t> block_table;  // MLA blocks covering [0, num_computed + new)
  int32_t slot = -1;                 // KDA state slot (−1 when the model has no KDA layers)
  SlotInit slot_init = SlotInit::kCarry;
  int32_t source_checkpoint = -1;                // with kFromCheckpoint
  std::vector<CheckpointSave> save_checkpoints;  // ascending num_tokens; none with drafts
  bool sample = false;                           // the last new token's logits are sampled
  // Speculative decoding (sample == true): the last num_draft_tokens of token_ids are proposed
  // continuations, not yet accepted. The executor samples the row of the token before the
  // first draft and, while the sampled token equals the next draft, the following rows: it
  // returns 1 + (accepted drafts) SampledTokens, the last one being the first token that differs
  // from its draft (or the token after the last draft). That is exactly what sampling one token
  // per step would give — the same distribution and, with a seed, the same draws. The caches
  // then hold the tokens before the drafts and the accepted drafts, nothing after: the KDA
  // state is advanced by exactly those (engine/kda_drafts.h); MLA rows of rejected drafts may
  // have been written past them (the scheduler frees or overwrites them).
  int32_t num_draft_tokens = 0;
  // The sampler of this sequence, created by the scheduler at admission; the executor calls it
  // (shared so a preempted sequence keeps its RNG and penalty state).
  std::shared_ptr<Sampler> sampler;
  int num_logprobs = -1;  // ≥ 0: also return log-probabilities (top n)
  // Prompt scoring (vLLM's prompt_logprobs, completions' echo with logprobs): when not empty,
  // new token i (i < score_targets.size() ≤ token_ids.size()) is scored: the log-probability
  // and rank of score_targets[i] (the prompt token after it) under the raw logits of token i,
  // and the top num_score_logprobs.
  std::vector<int32_t> score_targets;
  int num_score_logprobs = 0;
  // The sequence's images whose rows overlap this step's new tokens (positions in the
  // sequence): the forward takes their rows at those positions.
  std::vector<MediaEmbedding> media;
};

// Copies between the caches and the offload tiers (kvcache/offload, docs/kv-offload.md). Bytes
// of one unit are its rows in every layer's region, in layer order (kvcache/cache_layout.h,
// CacheUnitSpans): a block is its page in every MLA layer, a state row its state and conv rows in
// every KDA layer. The executor does every save, then every load, before anything else in the
// step (slot starts, the forward), so a save sees the bytes eviction left and a load is in
// place before the forward reads it.
enum class CacheUnit : uint8_t {
  kBlock,       // index: BlockId
  kCheckpoint,  // index: CheckpointId (its state row, CacheLayout::CheckpointRow)
  kSlot,        // index: SlotId (a live slot's state row)
};

// The arena spans of one unit under `layout` (in the order its bytes are laid out).
inline void CacheUnitSpans(const kvcache::CacheLayout& layout, CacheUnit unit, int32_t index,
                           std::vector<kvcache::CacheSpan>* spans) {
  switch (unit) {
    case CacheUnit::kBlock:
      return layout.BlockSpans(index, spans);
    case CacheUnit::kCheckpoint:
      CHECK(index >= 0 && index < layout.num_checkpoint_ids()) << "checkpoint " << index;
      return layout.StateRowSpans(layout.CheckpointRow(index), spans);
    case CacheUnit::kSlot:
      CHECK(index >= 0 && index < layout.num_slots) << "slot " << index;
      return layout.StateRowSpans(layout.SlotRow(index), spans);
  }
}

struct CacheSave {  // copy out; the bytes come back in StepResult::saved, same order
  CacheUnit unit = CacheUnit::kBlock;
  int32_t index = 0;
};

struct CacheLoad {  // copy in: `bytes` (exactly the unit's size) replace the unit's rows
  CacheUnit unit = CacheUnit::kBlock;
  int32_t index = 0;
  std::string bytes;
  // No sequence of this step reads or writes the unit (its sequence is still loading and
  // computes in a later step): the executor may copy it beside the step's kernels (the CUDA
  // executor's copy stream), as long as it lands before the step ends and after the step's
  // saves (a unit saved and reloaded in one step).
  bool beside_step = false;
};

struct StepPlan {
  int64_t step_id = 0;
  std::vector<ScheduledSequence> sequences;
  std::vector<CacheSave> cache_saves;  // evicted units a lower tier keeps
  std::vector<CacheLoad> cache_loads;  // units read back from a lower tier (prefix hits)
  int64_t num_tokens() const {
    int64_t n = 0;
    for (const auto& s : sequences) n += static_cast<int64_t>(s.token_ids.size());
    return n;
  }
};

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  SequenceId seq_id = 0;
  int32_t token_id = 0;
  float logprob = 0.0f;                    // of the chosen token (when requested)
  std::vector<TokenLogprob> top_logprobs;  // when num_logprobs > 0
};

// One scored token: its log-probability under the raw logits of the position before it, its
// rank there (how many tokens have a logit at least as high, itself included: 1 = the most
// likely; vLLM's rank), and the most likely tokens.
struct TokenScore {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int64_t rank = 0;
  std::vector<TokenLogprob> top;  // num_score_logprobs, most likely first (ties by id)
};

struct ScoredSequence {
  SequenceId seq_id = 0;
  std::vector<TokenScore> scores;  // one per score target, in order
};

struct StepResult {
  int64_t step_id = 0;
  // One per ScheduledSequence with sample == true, in plan order; a sequence with drafts has
  // 1 + (accepted drafts) consecutive entries.
  std::vector<SampledToken> sampled;
  // One per ScheduledSequence with score targets, in plan order (empty in most steps).
  std::vector<ScoredSequence> scored;
  // One per StepPlan::cache_saves, in order: the unit's bytes from before the step.
  std::vector<std::string> saved;
  double forward_ms = 0.0;
  // [num_experts] tokens routed to each expert in this step, summed over MoE layers (empty for
  // models without MoE or executors that do not measure it).
  std::vector<int64_t> expert_tokens;
};

}  // namespace strata::engine
