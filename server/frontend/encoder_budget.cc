#include "server/frontend/encoder_budget.h"

#include <algorithm>

namespace strata::frontend {

EncoderBudget::EncoderBudget(int64_t tokens_per_step, std::chrono::milliseconds idle_after)
    : tokens_per_step_(std::max<int64_t>(tokens_per_step, 0)), idle_after_(idle_after) {}

void EncoderBudget::SetTokensPerStep(int64_t tokens) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tokens_per_step_ = std::max<int64_t>(tokens, 0);
  }
  granted_.notify_all();
}

int64_t EncoderBudget::tokens_per_step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_per_step_;
}

void EncoderBudget::OnStep(bool busy, Clock::time_point now) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = busy;
    last_step_ = now;
    if (busy) {
      balance_ = std::min(balance_ + tokens_per_step_, 2 * tokens_per_step_);
      stats_.granted_tokens += tokens_per_step_;
    } else {
      balance_ = 0;  // idle: the tower runs freely, and starts from nothing when work comes
    }
  }
  granted_.notify_all();
}

bool EncoderBudget::IdleLocked(Clock::time_point now) const {
  return !busy_ || now - last_step_ >= idle_after_;
}

void EncoderBudget::Take(int64_t tokens) {
  std::unique_lock<std::mutex> lock(mu_);
  if (tokens_per_step_ == 0) return;
  const int64_t need = std::min(tokens, 2 * tokens_per_step_);
  const Clock::time_point began = Clock::now();
  bool waited = false;
  while (!stopped_ && balance_ < need && !IdleLocked(Clock::now())) {
    waited = true;
    // Wakes on a grant (or the engine going idle), or when the safety timeout may have passed.
    granted_.wait_for(lock, idle_after_);
  }
  if (!IdleLocked(Clock::now())) balance_ -= tokens;  // idle work is free
  if (waited) {
    ++stats_.waits;
    stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - began).count();
  }
}

void EncoderBudget::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  granted_.notify_all();
}

EncoderBudgetStats EncoderBudget::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace strata::frontend
