// Running a handler's pending response to its end without sockets, the way the HTTP server
// does, for tests that call a handler (OpenAiService::Handle) directly.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include <gtest/gtest.h>

#include "server/http/http_types.h"

namespace strata::frontend::testing {

// Without `result->pending`: result->response. Else Start, then Poll on every wake until Poll
// returns true, from a copy of result->response; returns what Poll left there (a stream's head
// with its whole body; a non-streamed generation's whole response). Fails the test and returns what
// there is when 20 s pass without a wake. The pending part is destroyed before this returns.
inline http::HttpResponse DrivePending(http::HandlerResult* result) {
  if (!result->pending) return result->response;
  std::mutex mu;
  std::condition_variable cv;
  bool woke = false;
  result->pending->Start([&] {
    std::lock_guard<std::mutex> lock(mu);
    woke = true;
    cv.notify_all();
  });
  http::HttpResponse out = result->response;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!result->pending->Poll(&out)) {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_until(lock, deadline, [&] { return woke; })) << "no progress";
    if (!woke) break;
    woke = false;
  }
  result->pending.reset();  // before `mu` and `cv`, which its wake callback uses
  return out;
}

}  // namespace strata::frontend::testing
