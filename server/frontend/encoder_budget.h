// The vision tower's share of the engine's steps (vLLM's encoder budget, from
// --max-num-batched-tokens). The tower runs on its own thread (image_inputs.h), beside the
// engine's steps, on the same cores or GPU; unpaced, a 3584² image (65,536 patches × 27 blocks)
// slows every running sequence's steps for as long as it takes. Paced, while the engine is busy
// each of its steps grants the tower `tokens_per_step` patch-tokens of encoder work — one block
// over n patches costs n, so the default grant (--max-num-batched-tokens × the tower's blocks) is
// vLLM's: a step's worth of encoder input tokens through the whole tower — and the tower waits
// for grants between its blocks. While the engine is idle (its last step left no request
// unfinished, or none ran yet; or, as a safety, no step came for `idle_after`) the tower runs
// freely. A block larger than two steps' grants runs once that much is
// granted and leaves the balance negative (the next blocks wait for it), so any image encodes.
//
// Thread-safe: OnStep from the engine loop threads, Take from the encoder thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace strata::frontend {

struct EncoderBudgetStats {
  int64_t waits = 0;           // Take calls that waited for the engine's steps
  double wait_seconds = 0;     // their time, summed
  int64_t granted_tokens = 0;  // granted by steps since the start
};

class EncoderBudget {
 public:
  using Clock = std::chrono::steady_clock;

  // `tokens_per_step` > 0 (0: Take never waits).
  EncoderBudget(int64_t tokens_per_step, std::chrono::milliseconds idle_after);

  // The engine ran a step with work at `now`, after which it has requests left (`busy`: grants
  // tokens_per_step, the balance capped at two steps' grants) or not (idle: the balance is 0).
  void OnStep(bool busy, Clock::time_point now = Clock::now());
  // The tower is about to run `tokens` of work: waits until the balance covers them (or two
  // steps' grants, whichever is less), the engine is idle, or Stop; then takes them.
  void Take(int64_t tokens);
  // Take never waits again (shutdown).
  void Stop();

  // The grant per step, set once the tower's size is known (0: Take never waits).
  void SetTokensPerStep(int64_t tokens);
  int64_t tokens_per_step() const;
  EncoderBudgetStats stats() const;

 private:
  bool IdleLocked(Clock::time_point now) const;

  int64_t tokens_per_step_;  // guarded by mu_
  const std::chrono::milliseconds idle_after_;
  mutable std::mutex mu_;
  std::condition_variable granted_;
  int64_t balance_ = 0;
  bool busy_ = false;  // the last step left requests unfinished
  Clock::time_point last_step_;
  bool stopped_ = false;
  EncoderBudgetStats stats_;
};

}  // namespace strata::frontend
