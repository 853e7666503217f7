// background_responses.h: one polling thread over the running responses.
#include "server/frontend/background_responses.h"

#include <chrono>
#include <utility>
#include <vector>

namespace strata::frontend {

BackgroundResponses::BackgroundResponses() {
  thread_ = std::thread([this] { Loop(); });
}

BackgroundResponses::~BackgroundResponses() { Stop(); }

bool BackgroundResponses::Add(const std::string& id, std::unique_ptr<http::PendingResponse> pending,
                              Callbacks callbacks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) {
    pending->Cancel();
    return false;
  }
  const int64_t key = next_key_++;
  http::PendingResponse* p = pending.get();
  running_.emplace(key, Entry{id, std::move(pending), std::move(callbacks)});
  keys_[id] = key;
  p->Start([wakes = wakes_, key] { wakes->Wake(key); });
  PollLocked(key, /*woken=*/false);  // the contract: Poll after Start
  return true;
}

bool BackgroundResponses::Cancel(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(id);
  if (it == keys_.end()) return false;
  running_.at(it->second).pending->Cancel();
  running_.erase(it->second);
  keys_.erase(it);
  return true;
}

bool BackgroundResponses::Running(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.contains(id);
}

int64_t BackgroundResponses::num_running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(running_.size());
}

void BackgroundResponses::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    for (auto& [key, entry] : running_) entry.pending->Cancel();
    running_.clear();
    keys_.clear();
  }
  wakes_->Wake(-1);  // the loop sees stop_
  thread_.join();
}

void BackgroundResponses::Loop() {
  while (true) {
    const std::vector<int64_t> woken =
        wakes_->Take(http::WakeQueue::Clock::now() + std::chrono::seconds(1));
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    for (int64_t key : woken) PollLocked(key, /*woken=*/true);
  }
}

void BackgroundResponses::PollLocked(int64_t key, bool woken) {
  auto it = running_.find(key);
  if (it == running_.end()) return;  // finished or cancelled; a late wake
  Entry& entry = it->second;
  if (woken && !entry.started) {
    entry.started = true;
    if (entry.callbacks.on_started) entry.callbacks.on_started();
  }
  http::HttpResponse out;
  if (!entry.pending->Poll(&out)) return;
  if (entry.callbacks.on_finished) entry.callbacks.on_finished(out);
  keys_.erase(entry.id);
  running_.erase(it);
}

}  // namespace strata::frontend
