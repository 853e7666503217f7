// A per-request output channel from the engine loop thread to a front end (HTTP, gRPC, CLI).
//
// The engine thread pushes events; one consumer pops them, blocking (Next) or in batches
// (Drain) after being woken by the notifier. Thread-safe. The stream is finished after an event
// with `finish` set (or an error); no event follows it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/step.h"
#include "scheduler/request.h"

namespace strata::server {

// Why a stream ended: the scheduler's reasons, named by scheduler::FinishReasonName.
using scheduler::FinishReason;
using scheduler::FinishReasonName;

// How far a request's prompt is computed (llama.cpp's prompt_progress): `processed` of `total`
// prompt tokens are in the caches, `cached` of them read from the prefix cache at admission;
// `time_ms` since the request's first step.
struct PrefillProgress {
  int64_t total = 0;
  int64_t cached = 0;
  int64_t processed = 0;
  double time_ms = 0.0;
};

struct StreamEvent {
  // At most one new token per event today (one decode step), kept as a list for batching.
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;  // per token, when requested
  std::vector<std::vector<engine::TokenLogprob>> top_logprobs;
  // With the first token of a request scoring its prompt: prompt tokens 1 .. n−1 scored.
  std::vector<engine::TokenScore> prompt_scores;
  std::optional<FinishReason> finish;
  absl::Status error;  // not ok: the request failed (e.g. rejected after submission)
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  int64_t num_output_tokens = 0;  // cumulative
  double elapsed_ms = 0.0;        // since submission to the engine loop, when pushed
  // Submission → the request's first step (its time waiting in the queue); set on every event
  // from that step on; absent for a request that never ran (cancelled while waiting) and on the
  // aborts EngineLoop::Stop sends.
  std::optional<double> queued_ms;
  // A progress event (only for requests with report_prefill_progress): the prompt's progress
  // after a prefill chunk; no token, no finish. The chunk that completes the prompt sends one
  // (processed == total) before the event of the first token.
  std::optional<PrefillProgress> progress;
  bool progress_only() const { return progress.has_value() && token_ids.empty() && !terminal(); }
  bool terminal() const { return finish.has_value() || !error.ok(); }
};

class RequestStream {
 public:
  explicit RequestStream(std::string request_id) : request_id_(std::move(request_id)) {}

  const std::string& request_id() const { return request_id_; }

  // Consumer: the next event, waiting up to `timeout`; nullopt on timeout.
  std::optional<StreamEvent> Next(absl::Duration timeout);
  // Consumer: every queued event (possibly none), without waiting.
  std::vector<StreamEvent> Drain();
  // Called (on the engine thread, without the lock held) after events are pushed. Set it
  // before submitting, or events pushed earlier are found by the next Drain.
  void SetNotifier(std::function<void()> notifier);

  // Producer (engine loop).
  void Push(StreamEvent event);
  bool finished() const;

 private:
  const std::string request_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  bool finished_ = false;
  std::function<void()> notifier_;
};

}  // namespace strata::server
