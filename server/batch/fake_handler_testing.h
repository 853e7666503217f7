// A fake HTTP handler for the batch tests: responses finish on another thread, newest first
// (so lines finish out of order), with a queue limit that answers 429 like the real service;
// and helpers to write input lines and read output lines.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "server/http/http_types.h"

namespace strata::batch::testing {

using Json = nlohmann::json;

// One request's response, finished by the completer thread.
struct Exchange {
  std::mutex mu;
  std::function<void()> wake;
  bool done = false;
  bool cancelled = false;
  bool held = false;  // set before the exchange is shared
  http::HttpResponse response;
};

class FakePending : public http::PendingResponse {
 public:
  explicit FakePending(std::shared_ptr<Exchange> e) : e_(std::move(e)) {}
  bool streaming() const override { return false; }
  void Start(std::function<void()> wake) override {
    std::lock_guard<std::mutex> lock(e_->mu);
    e_->wake = std::move(wake);
  }
  bool Poll(http::HttpResponse* out) override {
    std::lock_guard<std::mutex> lock(e_->mu);
    if (!e_->done) return false;
    *out = e_->response;
    return true;
  }
  void Cancel() override {
    std::lock_guard<std::mutex> lock(e_->mu);
    e_->cancelled = true;
  }

 private:
  std::shared_ptr<Exchange> e_;
};

// Answers {"echo": X} with {"id": "cmpl-X", "echo": X, "usage": {...}} after the completer
// finishes it; {"fail": true} with a 400 error object at once; more than `queue_limit` live
// exchanges with a 429.
class FakeHandler : public http::HttpHandler {
 public:
  explicit FakeHandler(int queue_limit = 1 << 20) : queue_limit_(queue_limit) {
    completer_ = std::thread([this] { CompleteLoop(); });
  }
  ~FakeHandler() override {
    stop_ = true;
    completer_.join();
  }

  http::HandlerResult Handle(http::HttpRequest request) override {
    const Json body = Json::parse(request.body);
    http::HandlerResult result;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_paths_.push_back(request.path);
      seen_bodies_.push_back(body);
      const std::string* auth = request.FindHeader("authorization");
      seen_auth_.push_back(auth ? *auth : "");
    }
    ++handled_;
    if (body.contains("fail")) {
      result.response.status = 400;
      result.response.body = R"({"error": {"message": "bad", "code": "invalid_value"}})";
      return result;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(live_.size()) >= queue_limit_) {
      ++refusals_;
      result.response.status = 429;
      result.response.body = R"({"error": {"message": "queue full"}})";
      return result;
    }
    auto e = std::make_shared<Exchange>();
    const std::string echo = body.value("echo", "");
    e->held = echo == held_;
    e->response.body = Json{{"id", absl::StrCat("cmpl-", echo)},
                            {"echo", echo},
                            {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 5}}}}
                           .dump();
    live_.push_back(e);
    max_live_ = std::max<int>(max_live_, static_cast<int>(live_.size()));
    result.pending = std::make_unique<FakePending>(e);
    return result;
  }

  http::HttpResponse ProtocolError(int, std::string_view, std::string_view) override { return {}; }

  // The exchange echoing `echo` does not finish until Release().
  void Hold(std::string echo) { held_ = std::move(echo); }
  void Release() { released_ = true; }
  int handled() const { return handled_; }
  int max_live() const { return max_live_; }
  int refusals() const { return refusals_; }
  std::vector<std::string> seen_paths_;  // written under mu_, read after the run
  std::vector<Json> seen_bodies_;
  std::vector<std::string> seen_auth_;  // each request's Authorization header ("": none)

 private:
  // Every millisecond: finishes the newest live exchange (out of input order) and wakes it.
  void CompleteLoop() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::shared_ptr<Exchange> e;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto it = live_.rbegin(); it != live_.rend(); ++it) {
          if ((*it)->held && !released_) continue;
          e = *it;
          live_.erase(std::next(it).base());
          break;
        }
        if (e == nullptr) continue;
      }
      std::function<void()> wake;
      {
        std::lock_guard<std::mutex> lock(e->mu);
        e->done = true;
        wake = e->wake;
      }
      if (wake) wake();
    }
  }

  const int queue_limit_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Exchange>> live_;
  int max_live_ = 0;
  int refusals_ = 0;
  std::string held_ = "\x01none";
  std::atomic<bool> released_{false};
  std::atomic<int> handled_{0};
  std::atomic<bool> stop_{false};
  std::thread completer_;
};

inline std::string Line(const std::string& custom_id, const Json& body,
                        const std::string& url = "/v1/chat/completions") {
  return Json{{"custom_id", custom_id}, {"method", "POST"}, {"url", url}, {"body", body}}.dump();
}

// `n` input lines: custom_id `prefix` + i, body {"echo": "i"} — or {"fail": true} for every
// `fail_every`-th line (the handler answers those with a 400); each line ends with a newline.
inline std::string EchoLines(int n, const std::string& prefix, int fail_every = 0) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    const bool fail = fail_every > 0 && i % fail_every == fail_every - 1;
    const Json body = fail ? Json{{"fail", true}} : Json{{"echo", absl::StrCat(i)}};
    absl::StrAppend(&text, Line(absl::StrCat(prefix, i), body), "\n");
  }
  return text;
}

inline std::vector<Json> OutputLines(const std::string& text) {
  std::vector<Json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(Json::parse(line));
  return lines;
}

}  // namespace strata::batch::testing
