// RequestTimingRecorder: the RequestTimings (server/metrics.h) of one request, measured where
// its RequestStream is consumed (the front end), i.e. as the client sees them.
//
//   RequestTimingRecorder rec(request_id, RequestTimingRecorder::Now());
//   for each popped event:  rec.OnEvent(event, RequestTimingRecorder::Now());
//   when rec.finished():    metrics.OnRequestFinished(rec.timings()); LogRequestFinished(...);
//
// Measured: time to first token, inter-token gaps, decode time (first → last token), end to
// end, token counts, finish reason ("error" for a stream that ended with an error status); queue
// time as the engine loop reports it (StreamEvent::queued_ms: submission → first step) and
// prefill time = time to first token − queue time (both unset for a request that never ran).
// Not thread-safe: one recorder per stream, used by the stream's consumer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "server/metrics.h"
#include "server/request_stream.h"

namespace strata::server {

class RequestTimingRecorder {
 public:
  // `submit_seconds` and every `now_seconds` are on one monotonic clock (e.g. Now()).
  // `num_prompt_tokens`: the prompt's length as submitted, so that a request that ends before
  // the engine reports one (cancelled or aborted while waiting) is logged with it.
  RequestTimingRecorder(std::string request_id, double submit_seconds,
                        int64_t num_prompt_tokens = 0);

  static double Now();  // steady clock, seconds

  // An event carrying k tokens records k gaps of (now - previous token) / k; the tokens of the
  // first such event after the first token record gaps of 0 (they arrived with it).
  void OnEvent(const StreamEvent& event, double now_seconds);
  bool finished() const { return finished_; }
  // Complete once finished(); before that, what is known so far.
  const RequestTimings& timings() const { return timings_; }
  // What a front end reports when it ends the request (REST, gRPC): timings() with the front
  // end's `finish_reason` (e.g. a stop string, "abort" on cancellation), and the time so far as
  // the end-to-end latency when no terminal event came.
  RequestTimings Ended(const std::string& finish_reason, double now_seconds) const;

 private:
  const double submit_seconds_;
  std::optional<double> first_token_seconds_;
  double last_token_seconds_ = 0.0;
  int64_t num_tokens_seen_ = 0;
  bool finished_ = false;
  RequestTimings timings_;
};

// One log line at info for a finished request, module "request", as key=value fields:
// `request_id=… finish=… prompt_tokens=… cached_tokens=… generation_tokens=… ttft_ms=…
// e2e_ms=…` (ttft_ms=-1 without a token; with `log::SetJsonLines(true)`, one JSON object per
// line).
void LogRequestFinished(const RequestTimings& timings);

}  // namespace strata::server
