// OpenAI's background mode for /v1/responses (`background: true`): the request returns at once
// (status "queued") while the response is generated; clients poll GET /v1/responses/{id} and
// may POST /v1/responses/{id}/cancel. This registry holds each running response's
// PendingResponse (the same GenerationResponse an open request would have) and polls it on one
// thread whenever it wakes — the work the HTTP server does for a request still open. What it
// produces goes to the response store through the callbacks (openai_service.h wires them).
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "server/http/http_types.h"
#include "server/http/wake_queue.h"

namespace strata::frontend {

class BackgroundResponses {
 public:
  // Both run on the registry's thread with its lock held: they must not call back into it.
  struct Callbacks {
    std::function<void()> on_started;  // the first wake: the engine is working on it
    // Poll's whole response (the response ended; an error status when it failed).
    std::function<void(const http::HttpResponse&)> on_finished;
  };

  BackgroundResponses();
  ~BackgroundResponses();  // Stop()
  BackgroundResponses(const BackgroundResponses&) = delete;
  BackgroundResponses& operator=(const BackgroundResponses&) = delete;

  // Takes over `pending` (not started) under `id` and starts it. After Stop it is cancelled at
  // once (false).
  bool Add(const std::string& id, std::unique_ptr<http::PendingResponse> pending,
           Callbacks callbacks);
  // Cancels the response running under `id` (no callback runs for it afterwards); false when
  // none runs (never, or already finished: its callbacks have run).
  bool Cancel(const std::string& id);
  bool Running(const std::string& id) const;
  int64_t num_running() const;
  // Cancels every running response and joins the thread (the engine is about to go).
  // Idempotent.
  void Stop();

 private:
  struct Entry {
    std::string id;
    std::unique_ptr<http::PendingResponse> pending;
    Callbacks callbacks;
    bool started = false;
  };

  void Loop();
  // Polls the entry under `key` (mu_ held; `woken`: its wake fired); removes it when it
  // finished.
  void PollLocked(int64_t key, bool woken);

  mutable std::mutex mu_;
  std::map<int64_t, Entry> running_;     // by key; guarded by mu_
  std::map<std::string, int64_t> keys_;  // id → key; guarded by mu_
  int64_t next_key_ = 0;                 // guarded by mu_
  bool stop_ = false;                    // guarded by mu_
  std::shared_ptr<http::WakeQueue> wakes_ = std::make_shared<http::WakeQueue>();
  std::thread thread_;
};

}  // namespace strata::frontend
