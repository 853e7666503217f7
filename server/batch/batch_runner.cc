// RunBatch (batch_runner.h): a window of requests in flight over the handler, woken by their
// pending responses, with output lines put back in input order.
#include "server/batch/batch_runner.h"

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/json_limits.h"
#include "core/status.h"
#include "server/http/wake_queue.h"

namespace strata::batch {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTooManyRequests = 429;

using http::WakeQueue;

struct InFlight {
  std::string custom_id;
  std::unique_ptr<http::PendingResponse> pending;
};

class Runner {
 public:
  Runner(http::HttpHandler& handler, std::istream& in, std::ostream& out,
         const BatchOptions& options)
      : handler_(handler), in_(in), out_(out), options_(options) {
    CHECK_GE(options.max_in_flight, 1);
    CHECK_GE(options.max_waiting_lines, 1);
  }

  ~Runner() {
    for (auto& [index, request] : in_flight_) request.pending->Cancel();
  }

  absl::StatusOr<BatchProgress> Run() {
    const Clock::time_point start = Clock::now();
    const auto interval = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(options_.progress_interval_s));
    Clock::time_point next_report = start + interval;
    while (true) {
      RETURN_IF_ERROR(Fill());
      RETURN_IF_ERROR(Flush());
      if (in_flight_.empty() && retry_.empty() && progress_.input_done) break;
      if (in_flight_.empty()) {  // refused with nothing in flight: the handler's queue is empty
        wait_for_room_ = false;
        continue;
      }
      for (int64_t index : wakes_->Take(next_report)) Poll(index);
      if (options_.abort && options_.abort()) Abort();
      progress_.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
      if (Clock::now() >= next_report) {
        progress_.in_flight = static_cast<int64_t>(in_flight_.size());
        if (options_.on_progress) options_.on_progress(progress_);
        next_report = Clock::now() + interval;
      }
    }
    progress_.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
    progress_.in_flight = 0;
    if (options_.on_progress) options_.on_progress(progress_);
    return progress_;
  }

 private:
  // Submits retries, then new lines, while the window has room and the handler is not full.
  absl::Status Fill() {
    if (!progress_.input_done && options_.pause && options_.pause()) {
      progress_.input_done = progress_.paused = true;
    } else if (!progress_.input_done && options_.stop && options_.stop()) {
      progress_.input_done = progress_.stopped = true;
    } else if (!progress_.expired_run && options_.expire && options_.expire()) {
      progress_.expired_run = true;
    }
    if (progress_.expired_run && !progress_.paused && !progress_.stopped) {
      for (auto& [index, line] : retry_) ExpireLine(index, line.custom_id);
      retry_.clear();
    }
    if (progress_.paused) {
      retry_.clear();  // sent by the run that carries on
    } else if (progress_.stopped) {
      for (auto& [index, line] : retry_) {
        ++progress_.cancelled;
        Finish(index, BatchErrorLine(OutputId(index), line.custom_id, "batch_cancelled",
                                     "the batch stopped before this request was sent"));
      }
      retry_.clear();
    }
    while (static_cast<int64_t>(in_flight_.size()) < options_.max_in_flight && !wait_for_room_) {
      if (!retry_.empty()) {  // earlier lines: sent whatever waits behind them
        auto [index, line] = std::move(retry_.front());
        retry_.pop_front();
        Submit(index, std::move(line));
        continue;
      }
      if (progress_.input_done ||
          static_cast<int64_t>(finished_.size()) >= options_.max_waiting_lines) {
        break;
      }
      std::string text;
      ASSIGN_OR_RETURN(bool more, ReadLine(&text));
      if (!more) {
        progress_.input_done = true;
        break;
      }
      const int64_t index = next_index_++;
      ++progress_.lines;
      std::optional<std::string> custom_id;
      absl::StatusOr<BatchRequestLine> line = ParseBatchLine(text, line_number_, &custom_id);
      if (progress_.expired_run && !WrittenBefore(index)) {
        ExpireLine(index, custom_id);
        continue;
      }
      if (line.ok()) {
        const auto [seen, fresh] = custom_ids_.emplace(line->custom_id, line_number_);
        if (!fresh) {
          line = absl::InvalidArgumentError(absl::StrCat("line ", line_number_, ": custom_id '",
                                                         line->custom_id, "' repeats line ",
                                                         seen->second, "'s"));
        }
      }
      if (WrittenBefore(index)) {  // no line now; Flush passes over it in order
        ++progress_.skipped;
        finished_.emplace(index, FinishedLine{.written_before = true});
        continue;
      }
      if (!line.ok()) {
        ++progress_.invalid;
        Finish(index, BatchErrorLine(OutputId(index), custom_id, "invalid_request",
                                     std::string(line.status().message())));
        continue;
      }
      Submit(index, *std::move(line));
    }
    return absl::OkStatus();
  }

  bool WrittenBefore(int64_t index) const {
    return index < static_cast<int64_t>(options_.written_before.size()) &&
           options_.written_before[static_cast<size_t>(index)];
  }

  // The next non-blank line (line_number_ counts every line); false at the end of the input.
  absl::StatusOr<bool> ReadLine(std::string* text) {
    while (std::getline(in_, *text)) {
      ++line_number_;
      if (!absl::StripAsciiWhitespace(*text).empty()) return true;
    }
    if (in_.bad()) {
      return absl::DataLossError(
          absl::StrCat("reading the input failed after line ", line_number_));
    }
    return false;
  }

  void Submit(int64_t index, BatchRequestLine line) {
    http::HttpRequest request;
    request.method = "POST";
    request.target = line.url;
    request.path = line.url;
    request.headers.push_back({"content-type", "application/json"});
    request.headers.insert(request.headers.end(), options_.headers.begin(), options_.headers.end());
    request.body = line.body;
    if (options_.default_priority) {
      // line.body passed ParseBatchLine's bounded parse; order kept as the client wrote it.
      absl::StatusOr<nlohmann::ordered_json> body = ParseBoundedJson(line.body);
      if (body.ok() && body->is_object() && !body->contains("priority")) {
        (*body)["priority"] = *options_.default_priority;
        request.body = body->dump();
      }
    }
    http::HandlerResult result = handler_.Handle(std::move(request));
    if (result.pending == nullptr) {
      if (result.response.status == kTooManyRequests && !in_flight_.empty()) {
        retry_.emplace_front(index, std::move(line));  // first in line when room frees
        wait_for_room_ = true;
        return;
      }
      FinishResponse(index, line.custom_id, result.response);
      return;
    }
    if (result.pending->streaming()) {  // ParseBatchLine refuses "stream": the handler's bug
      result.pending->Cancel();
      ++progress_.invalid;
      Finish(index, BatchErrorLine(OutputId(index), line.custom_id, "server_error",
                                   "the server answered with a stream"));
      return;
    }
    http::PendingResponse* pending = result.pending.get();
    in_flight_.emplace(index, InFlight{std::move(line.custom_id), std::move(result.pending)});
    pending->Start([wakes = wakes_, index] { wakes->Wake(index); });
    Poll(index);  // the contract: Poll after Start
  }

  // An error line for a request the run expired before sending.
  void ExpireLine(int64_t index, const std::optional<std::string>& custom_id) {
    ++progress_.expired;
    Finish(index, BatchErrorLine(OutputId(index), custom_id, "batch_expired",
                                 "the batch's completion window passed before this request was "
                                 "sent"));
  }

  // Cancels the requests in flight (their lines say so, unless the run pauses) and stops
  // reading.
  void Abort() {
    progress_.input_done = true;
    if (options_.pause && options_.pause()) progress_.paused = true;
    progress_.stopped = !progress_.paused;
    for (auto& [index, request] : in_flight_) {
      request.pending->Cancel();
      if (progress_.paused) continue;  // sent again by the run that carries on
      ++progress_.cancelled;
      Finish(index, BatchErrorLine(OutputId(index), request.custom_id, "batch_cancelled",
                                   "the batch was stopped before this request finished"));
    }
    in_flight_.clear();
    if (progress_.paused) retry_.clear();
  }

  void Poll(int64_t index) {
    const auto it = in_flight_.find(index);
    if (it == in_flight_.end()) return;  // woken again after it finished
    http::HttpResponse response;
    if (!it->second.pending->Poll(&response)) return;
    FinishResponse(index, it->second.custom_id, response);
    in_flight_.erase(it);
    wait_for_room_ = false;
  }

  void FinishResponse(int64_t index, const std::string& custom_id,
                      const http::HttpResponse& response) {
    ++(response.status / 100 == 2 ? progress_.succeeded : progress_.failed);
    Finish(index,
           BatchResponseLine(OutputId(index), custom_id, response.status, response.body,
                             &progress_.usage),
           /*answered=*/response.status / 100 == 2);
  }

  // `answered`: a 2xx response (every other line may go to options_.error_out).
  void Finish(int64_t index, std::string line, bool answered = false) {
    finished_.emplace(index, FinishedLine{std::move(line), answered});
  }

  // Writes the finished lines that every earlier line precedes.
  absl::Status Flush() {
    for (auto it = finished_.begin(); it != finished_.end() && it->first == next_to_write_;
         it = finished_.erase(it)) {
      if (it->second.written_before) {
        ++next_to_write_;
        ++progress_.finished;
        continue;
      }
      std::ostream& to =
          it->second.answered || options_.error_out == nullptr ? out_ : *options_.error_out;
      to << it->second.text << '\n' << std::flush;
      if (!to) {
        return absl::InternalError(
            absl::StrCat("writing output line ", next_to_write_ + 1, " failed"));
      }
      ++next_to_write_;
      ++progress_.finished;
    }
    return absl::OkStatus();
  }

  std::string OutputId(int64_t index) const {
    return absl::StrCat("batch_req_", options_.id_prefix, index);
  }

  http::HttpHandler& handler_;
  std::istream& in_;
  std::ostream& out_;
  const BatchOptions options_;
  BatchProgress progress_;
  int64_t line_number_ = 0;  // lines read, blank ones included (for messages)
  int64_t next_index_ = 0;   // index of the next request (non-blank line)
  int64_t next_to_write_ = 0;
  // A request was refused as over the handler's queue: nothing more is submitted until one in
  // flight finishes.
  bool wait_for_room_ = false;
  std::deque<std::pair<int64_t, BatchRequestLine>> retry_;
  std::unordered_map<int64_t, InFlight> in_flight_;
  struct FinishedLine {
    std::string text;
    bool answered = false;        // a 2xx response
    bool written_before = false;  // no line: an earlier run's output holds it
  };
  std::map<int64_t, FinishedLine> finished_;             // output lines waiting for earlier ones
  std::unordered_map<std::string, int64_t> custom_ids_;  // → the line that used it first
  std::shared_ptr<WakeQueue> wakes_ = std::make_shared<WakeQueue>();
};

}  // namespace

absl::StatusOr<BatchProgress> RunBatch(http::HttpHandler& handler, std::istream& in,
                                       std::ostream& out, const BatchOptions& options) {
  Runner runner(handler, in, out, options);
  return runner.Run();
}

}  // namespace strata::batch
