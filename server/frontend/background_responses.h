// OpenAI's background mode for /v1/responses (`background: true`): the request returns at once
// (status "queued") while the response is generated; clients poll GET /v1/responses/{id} and
// may POST /v1/responses/{id}/cancel. This registry holds each running response's
// PendingResponse (the same GenerationResponse an open request would have) and polls it on one
// thread whenever it wakes — the work the HTTP server does for a request still open. What it
// produces goes to the response store through the callbacks (openai_service.h wires them).
//
// A streamed background response (`stream: true` too) also keeps its events: any number of
// readers (Follow) stream them from a sequence number on and then live, so a client whose
// connection dropped resumes where it was (GET /v1/responses/{id}?stream=true&starting_after=N).
// A reader going away does not stop the response. The events of ended responses stay, oldest
// dropped first, within `kept_event_bytes`.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http/http_types.h"
#include "server/http/wake_queue.h"

namespace strata::frontend {

class BackgroundResponses {
 public:
  // Both run on the registry's thread with its lock held: they must not call back into it.
  struct Callbacks {
    std::function<void()> on_started;  // the first wake: the engine is working on it
    // Poll's last output (the response ended: its whole body, or a stream's last events).
    std::function<void(const http::HttpResponse&)> on_finished;
  };

  explicit BackgroundResponses(int64_t kept_event_bytes = int64_t{64} << 20);
  ~BackgroundResponses();  // Stop()
  BackgroundResponses(const BackgroundResponses&) = delete;
  BackgroundResponses& operator=(const BackgroundResponses&) = delete;

  // Takes over `pending` (not started) under `id` and starts it; a streaming one's events are
  // kept for Follow. After Stop it is cancelled at once (false).
  bool Add(const std::string& id, std::unique_ptr<http::PendingResponse> pending,
           Callbacks callbacks);
  // A stream of the events of response `id` whose index (the Responses API's
  // sequence_number) is above `starting_after` (-1: all), then of those to come until it ends.
  // Null when no events of `id` are kept (not a streamed background response, or dropped).
  std::unique_ptr<http::PendingResponse> Follow(const std::string& id, int64_t starting_after);
  // Cancels the response running under `id` (no callback runs for it afterwards; its readers'
  // streams end); false when none runs (never, or already finished: its callbacks have run).
  bool Cancel(const std::string& id);
  int64_t num_running() const;
  // Cancels every running response, ends every reader's stream and joins the thread (the
  // engine is about to go). Idempotent.
  void Stop();

 private:
  class Reader;
  // A streamed response's events (guarded by mu_).
  struct EventLog {
    std::vector<std::string> events;  // whole SSE events, by sequence number
    int64_t bytes = 0;
    bool ended = false;
    std::map<int64_t, std::function<void()>> readers;  // wake callbacks by reader key
  };
  struct Entry {
    std::string id;
    std::unique_ptr<http::PendingResponse> pending;
    Callbacks callbacks;
    std::shared_ptr<EventLog> log;  // streaming only
    bool started = false;
  };

  void Loop();
  // Polls the entry under `key` (mu_ held; `woken`: its wake fired); removes it when it
  // finished.
  void PollLocked(int64_t key, bool woken);
  // Ends `id`'s log (its readers' streams finish) and keeps it within kept_event_bytes_
  // (mu_ held).
  void EndLogLocked(const std::string& id);

  const int64_t kept_event_bytes_;
  mutable std::mutex mu_;
  std::map<int64_t, Entry> running_;                       // by key; guarded by mu_
  std::map<std::string, int64_t> keys_;                    // id → key; guarded by mu_
  std::map<std::string, std::shared_ptr<EventLog>> logs_;  // by id; guarded by mu_
  std::deque<std::string> ended_logs_;                     // oldest first; guarded by mu_
  int64_t ended_log_bytes_ = 0;                            // guarded by mu_
  int64_t next_key_ = 0;                                   // entries and readers; mu_
  bool stop_ = false;                                      // guarded by mu_
  std::shared_ptr<http::WakeQueue> wakes_ = std::make_shared<http::WakeQueue>();
  std::thread thread_;
};

}  // namespace strata::frontend
