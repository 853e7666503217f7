// PrefillPacer: how many prefill tokens a step that also carries decodes may take, so that the
// sequences generating get a token about every `target_step_ms` while prompts are prefilled.
//
// A step runs its decodes and its prompt chunks in one forward, so every generating sequence
// waits for the whole step. With the default budget of 2,048 tokens a long prompt arriving on a
// CPU makes a step of ~10 s (bench checkpoint, 2 cores: ~200 prefill tokens/s): every running
// stream stops for that long. Cutting prompt chunks while others decode bounds that gap; each
// extra chunk costs one more pass over the weights (~65 ms there), so the cap is as large as the
// target allows and no cap applies when nothing decodes (Scheduler::SetPrefillTokensWithDecodes).
//
// The pacer learns from the steps it is shown (Observe): the time of a step with decodes only
// (exponential average) and the time per prefill token (steps with ≥ kMinObservedTokens prefill
// tokens, the decodes' share taken out). Then
//   tokens() = (target − decode step time) / time per token,
// rounded down to a multiple of `multiple`, within [min_tokens, max_tokens]: a step is then about
// the target, and never less than min_tokens of progress for the prompts. Before the first
// observation it answers initial_tokens. Deterministic: a function of the observations.
#pragma once

#include <cstdint>

namespace strata::scheduler {

struct PrefillPacerConfig {
  double target_step_ms = 0.0;   // 0: off (tokens() = 0, no cap)
  int64_t min_tokens = 64;       // progress per step for the prompts, at least
  int64_t max_tokens = 2048;     // the step budget (max_num_batched_tokens)
  int64_t initial_tokens = 256;  // before any prefill step was seen
  int64_t multiple = 16;         // caps are multiples of this (the KDA chunk) where ≥ it
};

class PrefillPacer {
 public:
  // Prefill steps with fewer tokens say little about the time per token (fixed costs dominate).
  static constexpr int64_t kMinObservedTokens = 16;
  // Weight of the newest observation in the averages.
  static constexpr double kSmoothing = 0.25;

  explicit PrefillPacer(const PrefillPacerConfig& config);

  // One finished step: its prefill tokens (prompts, recomputes), decode tokens and wall time.
  void Observe(int64_t prefill_tokens, int64_t decode_tokens, double step_ms);

  // The cap for the next step's prefill tokens while it carries decodes; 0 when off.
  int64_t tokens() const;

  double ms_per_token() const { return ms_per_token_; }  // < 0: none seen yet

 private:
  PrefillPacerConfig config_;
  double decode_step_ms_ = -1.0;
  double ms_per_token_ = -1.0;
};

}  // namespace strata::scheduler
