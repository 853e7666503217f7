// The keys of pending responses whose wake callback fired, for a thread that polls many of them
// (http::PendingResponse::Start): any thread may Wake, also after the poller stopped caring (the
// queue is shared with the callbacks). Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace strata::http {

class WakeQueue {
 public:
  using Clock = std::chrono::steady_clock;

  void Wake(int64_t key) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      woken_.push_back(key);
    }
    cv_.notify_one();
  }

  // The keys woken so far, waiting until there is one or `deadline` passes.
  std::vector<int64_t> Take(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, deadline, [this] { return !woken_.empty(); });
    return std::exchange(woken_, {});
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> woken_;
};

}  // namespace strata::http
