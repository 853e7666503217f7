#include "server/frontend/deferred_response.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "core/check.h"
#include "server/frontend/response_render.h"

namespace strata::frontend {

DeferredWork::DeferredWork(int threads) {
  CHECK_GT(threads, 0);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

DeferredWork::~DeferredWork() {
  std::deque<std::function<void(bool)>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(tasks_);
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
  for (auto& task : dropped) task(false);
}

void DeferredWork::Post(std::function<void(bool)> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      tasks_.push_back(std::move(task));
      task = nullptr;
    }
  }
  if (task) {
    task(false);
    return;
  }
  wake_.notify_one();
}

void DeferredWork::Loop() {
  for (;;) {
    std::function<void(bool)> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (stopping_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task(true);
  }
}

namespace {

// Shared by the response (the I/O thread) and its task (a pool thread).
struct DeferredState {
  std::mutex mu;
  std::optional<DeferredResult> result;  // set once by the task
  std::function<void()> wake;            // the server's, once Start ran
  bool cancelled = false;
};

class DeferredResponse final : public http::PendingResponse {
 public:
  DeferredResponse(std::shared_ptr<DeferredState> state, bool stream, DeferredErrorFormat format)
      : state_(std::move(state)), stream_(stream), format_(std::move(format)) {}

  bool streaming() const override { return stream_; }

  void Start(std::function<void()> wake) override {
    bool ready = false;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->wake = wake;
      ready = state_->result.has_value();
    }
    if (ready) wake();
    wake_ = std::move(wake);
  }

  bool Poll(http::HttpResponse* out) override {
    if (inner_ == nullptr) {
      std::optional<DeferredResult> result;
      {
        std::lock_guard<std::mutex> lock(state_->mu);
        if (!state_->result.has_value()) return false;  // the work is still running
        result = std::move(state_->result);
        state_->result = DeferredResult(absl::InternalError("taken"));
      }
      if (!result->ok()) {
        if (stream_) {
          out->body += format_.error_event(result->status());
        } else {
          *out = format_.error_response(result->status());
        }
        return true;
      }
      if ((*result)->pending == nullptr) {  // a whole response
        if (stream_) {
          out->body += (*result)->response.body;
        } else {
          *out = std::move((*result)->response);
        }
        return true;
      }
      inner_ = std::move((*result)->pending);
      inner_->Start(wake_);
    }
    return inner_->Poll(out);
  }

  std::string_view keepalive_bytes() const override {
    return inner_ != nullptr ? inner_->keepalive_bytes()
                             : (stream_ ? kSsePing : std::string_view());
  }

  void Cancel() override {
    if (inner_ != nullptr) {
      inner_->Cancel();
      return;
    }
    std::optional<DeferredResult> result;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->cancelled = true;
      state_->wake = nullptr;
      result = std::move(state_->result);
      state_->result.reset();
    }
    // Done before the client left: stop the generation it started.
    if (result.has_value() && result->ok() && (*result)->pending != nullptr) {
      (*result)->pending->Cancel();
    }
  }

 private:
  const std::shared_ptr<DeferredState> state_;
  const bool stream_;
  const DeferredErrorFormat format_;
  std::function<void()> wake_;
  std::unique_ptr<http::PendingResponse> inner_;  // the work's response, once taken
};

}  // namespace

http::HandlerResult Defer(DeferredWork& pool, bool stream, http::HttpResponse head,
                          DeferredErrorFormat format, std::function<DeferredResult()> work) {
  auto state = std::make_shared<DeferredState>();
  pool.Post([state, work = std::move(work)](bool run) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->cancelled) return;  // the client left while it waited: nothing to do
    }
    DeferredResult result =
        run ? work() : DeferredResult(absl::UnavailableError("the server is shutting down"));
    std::function<void()> wake;
    bool kept = false;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (!state->cancelled) {
        state->result = std::move(result);
        wake = state->wake;  // null before Start: Start wakes the server then
        kept = true;
      }
    }
    if (wake) wake();
    if (!kept && result.ok() && result->pending != nullptr) {
      result->pending->Cancel();  // the client left while the work ran
    }
  });
  http::HandlerResult out;
  out.response = std::move(head);
  out.pending = std::make_unique<DeferredResponse>(std::move(state), stream, std::move(format));
  return out;
}

}  // namespace strata::frontend
