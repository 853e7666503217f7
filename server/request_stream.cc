#include "server/request_stream.h"

namespace strata::server {

std::optional<StreamEvent> RequestStream::Next(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] { return !events_.empty(); })) {
    return std::nullopt;
  }
  StreamEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

std::vector<StreamEvent> RequestStream::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<StreamEvent> out(std::make_move_iterator(events_.begin()),
                               std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

void RequestStream::SetNotifier(std::function<void()> notifier) {
  std::lock_guard<std::mutex> lock(mu_);
  notifier_ = std::move(notifier);
}

void RequestStream::Push(StreamEvent event) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = event.terminal();
    events_.push_back(std::move(event));
    notify = notifier_;
  }
  cv_.notify_all();
  if (notify) notify();
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

}  // namespace strata::server
