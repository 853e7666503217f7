// background_responses.h: one polling thread over the running responses; event logs and their
// readers.
#include "server/frontend/background_responses.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <utility>

#include "server/frontend/response_render.h"

namespace strata::frontend {
namespace {

// Splits SSE text into whole events ("...\n\n" each) onto `events`; returns the bytes added.
int64_t AppendEvents(std::string_view text, std::vector<std::string>* events) {
  int64_t bytes = 0;
  while (!text.empty()) {
    const size_t end = text.find("\n\n");
    const size_t n = end == std::string_view::npos ? text.size() : end + 2;
    events->emplace_back(text.substr(0, n));
    bytes += static_cast<int64_t>(n);
    text.remove_prefix(n);
  }
  return bytes;
}

void WakeReaders(const std::map<int64_t, std::function<void()>>& readers) {
  for (const auto& [key, wake] : readers) wake();
}

}  // namespace

// One client's stream of a log: the events after its cursor, then the new ones as they come.
class BackgroundResponses::Reader : public http::PendingResponse {
 public:
  Reader(BackgroundResponses* owner, std::shared_ptr<EventLog> log, size_t cursor)
      : owner_(owner), log_(std::move(log)), cursor_(cursor) {}
  ~Reader() override { Cancel(); }

  bool streaming() const override { return true; }
  void Start(std::function<void()> wake) override {
    std::lock_guard<std::mutex> lock(owner_->mu_);
    key_ = owner_->next_key_++;
    log_->readers.emplace(key_, std::move(wake));
  }
  bool Poll(http::HttpResponse* out) override {
    std::lock_guard<std::mutex> lock(owner_->mu_);
    for (; cursor_ < log_->events.size(); ++cursor_) out->body += log_->events[cursor_];
    return log_->ended;
  }
  std::string_view keepalive_bytes() const override { return kSsePing; }
  void Cancel() override {
    std::lock_guard<std::mutex> lock(owner_->mu_);
    if (key_ >= 0) log_->readers.erase(key_);
    key_ = -1;
  }

 private:
  BackgroundResponses* const owner_;
  const std::shared_ptr<EventLog> log_;
  size_t cursor_;
  int64_t key_ = -1;  // registered wake (guarded by owner_->mu_)
};

BackgroundResponses::BackgroundResponses(int64_t kept_event_bytes)
    : kept_event_bytes_(kept_event_bytes) {
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
  Entry entry{id, std::move(pending), std::move(callbacks)};
  if (p->streaming()) {
    entry.log = std::make_shared<EventLog>();
    logs_[id] = entry.log;
  }
  running_.emplace(key, std::move(entry));
  keys_[id] = key;
  p->Start([wakes = wakes_, key] { wakes->Wake(key); });
  PollLocked(key, /*woken=*/false);  // the contract: Poll after Start
  return true;
}

std::unique_ptr<http::PendingResponse> BackgroundResponses::Follow(const std::string& id,
                                                                   int64_t starting_after) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = logs_.find(id);
  if (it == logs_.end()) return nullptr;
  const size_t cursor = static_cast<size_t>(std::max<int64_t>(starting_after + 1, 0));
  return std::make_unique<Reader>(this, it->second, cursor);
}

bool BackgroundResponses::Cancel(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(id);
  if (it == keys_.end()) return false;
  running_.at(it->second).pending->Cancel();
  running_.erase(it->second);
  keys_.erase(it);
  EndLogLocked(id);
  return true;
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
    for (auto& [key, entry] : running_) {
      entry.pending->Cancel();
      if (entry.log) EndLogLocked(entry.id);
    }
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
  const bool done = entry.pending->Poll(&out);
  if (entry.log && !out.body.empty()) {
    entry.log->bytes += AppendEvents(out.body, &entry.log->events);
    WakeReaders(entry.log->readers);
  }
  if (!done) return;
  if (entry.callbacks.on_finished) entry.callbacks.on_finished(out);
  const std::string id = entry.id;
  const bool logged = entry.log != nullptr;
  keys_.erase(id);
  running_.erase(it);
  if (logged) EndLogLocked(id);
}

void BackgroundResponses::EndLogLocked(const std::string& id) {
  auto it = logs_.find(id);
  if (it == logs_.end() || it->second->ended) return;
  it->second->ended = true;
  WakeReaders(it->second->readers);
  ended_logs_.push_back(id);
  ended_log_bytes_ += it->second->bytes;
  while (ended_log_bytes_ > kept_event_bytes_ && !ended_logs_.empty()) {
    auto oldest = logs_.find(ended_logs_.front());
    ended_log_bytes_ -= oldest->second->bytes;  // readers still holding it finish it
    logs_.erase(oldest);
    ended_logs_.pop_front();
  }
}

}  // namespace strata::frontend
