// Requests whose answer needs blocking work first — a chat whose image is fetched from an http(s)
// URL (up to --media-fetch-timeout) or read from a file:// path, then decoded — are answered by
// a DeferredResponse: the work runs on a DeferredWork thread and the HTTP I/O thread that took
// the request goes back to serving others (health probes, streams, other requests) at once.
//
//   handler: checks what it can without blocking → Defer(pool, stream, work) → returns
//   pool thread: work() → the response it would have returned (a generation, or an error)
//   I/O thread: Poll → nothing until then; then the work's response, polled through
//
// The head is sent before the work is done for a streamed request (200, text/event-stream), so
// an error the work finds then (a fetch that failed: 400 naming the part) is the stream's error
// event, as for any error after a stream started; a request that is not streamed gets the
// error's own status. A client that leaves before the work is done has its generation cancelled
// as soon as it exists.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "server/http/http_types.h"

namespace strata::frontend {

// A few threads for handlers' blocking work. Tasks run in arrival order; the destructor finishes
// the running ones, drops the queued ones (their responses end with 503) and joins.
class DeferredWork {
 public:
  explicit DeferredWork(int threads);
  ~DeferredWork();
  DeferredWork(const DeferredWork&) = delete;
  DeferredWork& operator=(const DeferredWork&) = delete;

  // `task(true)` on a pool thread; `task(false)` on the destroying thread for a task dropped at
  // shutdown.
  void Post(std::function<void(bool run)> task);

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void(bool)>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// What the deferred work returns: the handler's result, or the error to answer with.
using DeferredResult = absl::StatusOr<http::HandlerResult>;

// Runs `work` on `pool` and returns the response that waits for it. `stream`: the request's
// stream flag (the head the server sends at once then is `head`). `error_body`: the JSON body of
// an error for a response that is not streamed; `error_event`: the SSE bytes that end a stream
// with it (the APIs shape their errors differently).
struct DeferredErrorFormat {
  std::function<http::HttpResponse(const absl::Status&)> error_response;
  std::function<std::string(const absl::Status&)> error_event;
};
http::HandlerResult Defer(DeferredWork& pool, bool stream, http::HttpResponse head,
                          DeferredErrorFormat format, std::function<DeferredResult()> work);

}  // namespace strata::frontend
