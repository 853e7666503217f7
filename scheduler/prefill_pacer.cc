// PrefillPacer (prefill_pacer.h).
#include "scheduler/prefill_pacer.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace strata::scheduler {
namespace {

double Smooth(double average, double sample) {
  return average < 0 ? sample
                     : (1 - PrefillPacer::kSmoothing) * average + PrefillPacer::kSmoothing * sample;
}

}  // namespace

PrefillPacer::PrefillPacer(const PrefillPacerConfig& config) : config_(config) {
  CHECK_GE(config_.target_step_ms, 0.0);
  CHECK_GE(config_.min_tokens, 1);
  CHECK_GE(config_.max_tokens, 1);
  CHECK_GE(config_.multiple, 1);
  config_.min_tokens = std::min(config_.min_tokens, config_.max_tokens);
}

void PrefillPacer::Observe(int64_t prefill_tokens, int64_t decode_tokens, double step_ms) {
  if (!(step_ms >= 0) || !std::isfinite(step_ms)) return;
  if (prefill_tokens == 0) {
    if (decode_tokens > 0) decode_step_ms_ = Smooth(decode_step_ms_, step_ms);
    return;
  }
  if (prefill_tokens < kMinObservedTokens) return;
  // The decodes' share, as a decode-only step took; at least half the step stays the prompts'
  // (an average from a larger batch must not make the prompts look free).
  const double decode_share = decode_tokens > 0 && decode_step_ms_ > 0 ? decode_step_ms_ : 0.0;
  const double prefill_ms = std::max(step_ms - decode_share, 0.5 * step_ms);
  ms_per_token_ = Smooth(ms_per_token_, prefill_ms / static_cast<double>(prefill_tokens));
}

int64_t PrefillPacer::tokens() const {
  if (config_.target_step_ms <= 0) return 0;
  int64_t tokens = config_.initial_tokens;
  if (ms_per_token_ > 0) {
    const double available_ms = config_.target_step_ms - std::max(decode_step_ms_, 0.0);
    const double fit = available_ms / ms_per_token_;
    tokens = fit >= static_cast<double>(config_.max_tokens) ? config_.max_tokens
                                                            : static_cast<int64_t>(fit);
  }
  if (tokens >= config_.multiple) tokens -= tokens % config_.multiple;
  return std::clamp(tokens, config_.min_tokens, config_.max_tokens);
}

}  // namespace strata::scheduler
