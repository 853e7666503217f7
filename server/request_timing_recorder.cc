#include "server/request_timing_recorder.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>

#include "core/log.h"

namespace strata::server {

RequestTimingRecorder::RequestTimingRecorder(std::string request_id, double submit_seconds,
                                             int64_t num_prompt_tokens)
    : submit_seconds_(submit_seconds) {
  timings_.request_id = std::move(request_id);
  timings_.num_prompt_tokens = num_prompt_tokens;
}

double RequestTimingRecorder::Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void RequestTimingRecorder::OnEvent(const StreamEvent& event, double now_seconds) {
  if (finished_) return;
  const size_t num_tokens = event.token_ids.size();
  if (num_tokens > 0) {
    size_t num_gaps = num_tokens;
    double gap = 0.0;
    if (!first_token_seconds_) {  // tokens after the first in this event arrived with it
      first_token_seconds_ = now_seconds;
      timings_.ttft_seconds = now_seconds - submit_seconds_;
      num_gaps = num_tokens - 1;
    } else {
      gap = (now_seconds - last_token_seconds_) / static_cast<double>(num_tokens);
    }
    timings_.inter_token_seconds.insert(timings_.inter_token_seconds.end(), num_gaps, gap);
    last_token_seconds_ = now_seconds;
    num_tokens_seen_ += static_cast<int64_t>(num_tokens);
  }
  timings_.num_generation_tokens =
      std::max({timings_.num_generation_tokens, num_tokens_seen_, event.num_output_tokens});
  timings_.num_prompt_tokens = std::max(timings_.num_prompt_tokens, event.num_prompt_tokens);
  timings_.num_cached_tokens = std::max(timings_.num_cached_tokens, event.num_cached_tokens);
  if (event.queued_ms && !timings_.queue_seconds) timings_.queue_seconds = *event.queued_ms / 1e3;
  if (timings_.ttft_seconds && timings_.queue_seconds && !timings_.prefill_seconds) {
    // Scheduled → first token; the queue time is the engine's, so clamp its clock's offset.
    timings_.prefill_seconds = std::max(0.0, *timings_.ttft_seconds - *timings_.queue_seconds);
  }
  if (!event.terminal()) return;
  finished_ = true;
  timings_.finished_reason = !event.error.ok() ? "error" : FinishReasonName(*event.finish);
  timings_.e2e_seconds = now_seconds - submit_seconds_;
  if (first_token_seconds_) timings_.decode_seconds = last_token_seconds_ - *first_token_seconds_;
}

RequestTimings RequestTimingRecorder::Ended(const std::string& finish_reason,
                                            double now_seconds) const {
  RequestTimings t = timings_;
  t.finished_reason = finish_reason;
  if (!finished_) t.e2e_seconds = now_seconds - submit_seconds_;
  return t;
}

void LogRequestFinished(const RequestTimings& t) {
  LOG_INFO("request",
           "request_id={} finish={} prompt_tokens={} cached_tokens={} generation_tokens={} "
           "ttft_ms={:.1f} e2e_ms={:.1f}",
           t.request_id, t.finished_reason, t.num_prompt_tokens, t.num_cached_tokens,
           t.num_generation_tokens, t.ttft_seconds.value_or(-0.001) * 1e3, t.e2e_seconds * 1e3);
}

}  // namespace strata::server
