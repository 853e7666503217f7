// RunBatch over a fake handler whose responses finish on another thread, newest first (so
// lines finish out of order), with a queue limit that answers 429 like the real service.
#include "server/batch/batch_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "server/batch/fake_handler_testing.h"

namespace strata::batch {
namespace {

using testing::EchoLines;
using testing::FakeHandler;
using ::testing::HasSubstr;
using testing::Json;
using testing::Line;
using testing::OutputLines;

TEST(RunBatch, OutputFollowsInputOrderThoughResponsesFinishOutOfOrder) {
  FakeHandler handler;
  std::string input;
  // Echoes of different lengths: the bodies differ in size, not only in value.
  auto echo_of = [](int i) { return i % 7 == 0 ? absl::StrCat("x", i) : absl::StrCat(i); };
  for (int i = 0; i < 40; ++i)
    absl::StrAppend(&input, Line(absl::StrCat("r", i), {{"echo", echo_of(i)}}), "\n");
  std::istringstream in(input);
  std::ostringstream out;
  BatchOptions options;
  options.max_in_flight = 8;
  options.id_prefix = "t_";
  const absl::StatusOr<BatchProgress> done = RunBatch(handler, in, out, options);
  ASSERT_TRUE(done.ok()) << done.status();
  const std::vector<Json> lines = OutputLines(out.str());
  ASSERT_EQ(lines.size(), 40u);
  for (int i = 0; i < 40; ++i) {
    const std::string echo = echo_of(i);
    SCOPED_TRACE(i);
    EXPECT_EQ(lines[i]["id"], absl::StrCat("batch_req_t_", i));
    EXPECT_EQ(lines[i]["custom_id"], absl::StrCat("r", i));
    EXPECT_EQ(lines[i]["response"]["status_code"], 200);
    EXPECT_EQ(lines[i]["response"]["request_id"], absl::StrCat("cmpl-", echo));
    EXPECT_EQ(lines[i]["response"]["body"]["echo"], echo);  // the body as JSON, not text
    EXPECT_TRUE(lines[i]["error"].is_null());
  }
  EXPECT_EQ(done->lines, 40);
  EXPECT_EQ(done->finished, 40);
  EXPECT_EQ(done->succeeded, 40);
  EXPECT_EQ(done->usage.prompt_tokens, 40 * 3);
  EXPECT_EQ(done->usage.completion_tokens, 40 * 5);
  EXPECT_TRUE(done->input_done);
  EXPECT_LE(handler.max_live(), 8);
  EXPECT_GE(handler.max_live(), 2);  // concurrent, not one at a time
}

TEST(RunBatch, BadLinesGetErrorLinesNamingTheLineAndTheOthersRun) {
  FakeHandler handler;
  const std::string input =
      Line("a", {{"echo", "1"}}) + "\n" +  // line 1
      "{not json\n" +                      // line 2
      "\n" +                               // line 3: blank, skipped
      R"({"method": "POST", "url": "/v1/completions", "body": {}})" + "\n" +                   // 4
      R"({"custom_id": "g", "method": "GET", "url": "/v1/completions", "body": {}})" + "\n" +  // 5
      Line("u", {{"echo", "2"}}, "/v1/embeddings") + "\n" +                                    // 6
      Line("s", {{"echo", "3"}, {"stream", true}}) + "\n" +                                    // 7
      Line("a", {{"echo", "4"}}) + "\n" +   // 8: repeat
      Line("f", {{"fail", true}}) + "\n" +  // 9
      R"({"custom_id": "nb", "method": "POST", "url": "/v1/completions", "body": "text"})" +
      "\n" +                                        // 10
      Line("z", {{"echo", "5"}}, "/v1/responses");  // 11, no \n
  std::istringstream in(input);
  std::ostringstream out;
  const absl::StatusOr<BatchProgress> done = RunBatch(handler, in, out, BatchOptions{});
  ASSERT_TRUE(done.ok()) << done.status();
  const std::vector<Json> lines = OutputLines(out.str());
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_EQ(lines[0]["response"]["body"]["echo"], "1");
  struct Expected {
    Json custom_id;
    std::string message;
  };
  const Expected errors[] = {{nullptr, "line 2: not valid JSON"},
                             {nullptr, "line 4: custom_id must be a non-empty string"},
                             {"g", "line 5: method must be \"POST\""},
                             {"u", "line 6: url must be /v1/chat/completions"},
                             {"s", "line 7: body.stream"},
                             {"a", "line 8: custom_id 'a' repeats line 1's"}};
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(i);
    const Json& line = lines[1 + i];
    EXPECT_EQ(line["custom_id"], errors[i].custom_id);
    EXPECT_TRUE(line["response"].is_null());
    EXPECT_EQ(line["error"]["code"], "invalid_request");
    EXPECT_THAT(line["error"]["message"].get<std::string>(), HasSubstr(errors[i].message));
  }
  // An API error is a response with its status and the error object as the body.
  EXPECT_EQ(lines[7]["custom_id"], "f");
  EXPECT_EQ(lines[7]["response"]["status_code"], 400);
  EXPECT_EQ(lines[7]["response"]["body"]["error"]["code"], "invalid_value");
  EXPECT_TRUE(lines[7]["response"]["request_id"].is_null());
  EXPECT_TRUE(lines[7]["error"].is_null());
  EXPECT_THAT(lines[8]["error"]["message"].get<std::string>(),
              HasSubstr("line 10: body must be a JSON object"));
  EXPECT_EQ(lines[9]["custom_id"], "z");
  EXPECT_EQ(lines[9]["response"]["body"]["echo"], "5");
  EXPECT_EQ(done->lines, 10);
  EXPECT_EQ(done->succeeded, 2);
  EXPECT_EQ(done->failed, 1);
  EXPECT_EQ(done->invalid, 7);
  EXPECT_EQ(
      handler.seen_paths_,
      (std::vector<std::string>{"/v1/chat/completions", "/v1/chat/completions", "/v1/responses"}));
}

TEST(RunBatch, RequestsRefusedAsOverTheQueueAreSentAgainNotFailed) {
  FakeHandler handler(/*queue_limit=*/3);
  const std::string input = EchoLines(30, "r");
  std::istringstream in(input);
  std::ostringstream out;
  BatchOptions options;
  options.max_in_flight = 10;  // more than the handler takes
  const absl::StatusOr<BatchProgress> done = RunBatch(handler, in, out, options);
  ASSERT_TRUE(done.ok()) << done.status();
  const std::vector<Json> lines = OutputLines(out.str());
  ASSERT_EQ(lines.size(), 30u);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(lines[i]["response"]["status_code"], 200) << i;
    EXPECT_EQ(lines[i]["response"]["body"]["echo"], absl::StrCat(i)) << i;
  }
  EXPECT_EQ(done->succeeded, 30);
  EXPECT_GT(handler.refusals(), 0);  // the retry path ran
  EXPECT_LE(handler.max_live(), 3);
}

TEST(RunBatch, StopEndsTheInputAndTheRequestsInFlightFinish) {
  FakeHandler handler(/*queue_limit=*/2);
  const std::string input = EchoLines(40, "r");
  std::istringstream in(input);
  std::ostringstream out;
  BatchOptions options;
  options.max_in_flight = 4;  // more than the handler takes: 429s wait to be re-sent
  options.stop = [&handler] { return handler.handled() >= 10; };
  const absl::StatusOr<BatchProgress> done = RunBatch(handler, in, out, options);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->stopped);
  EXPECT_TRUE(done->input_done);
  const std::vector<Json> lines = OutputLines(out.str());
  ASSERT_GE(lines.size(), 4u);  // handled() counts the 429s too
  ASSERT_LT(lines.size(), 40u);
  EXPECT_EQ(done->lines, static_cast<int64_t>(lines.size()));
  EXPECT_EQ(done->succeeded + done->cancelled, done->lines);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["custom_id"], absl::StrCat("r", i));  // a prefix of the input, in order
    if (lines[i]["response"].is_null()) {
      EXPECT_EQ(lines[i]["error"]["code"], "batch_cancelled") << i;
    } else {
      EXPECT_EQ(lines[i]["response"]["body"]["echo"], absl::StrCat(i)) << i;
    }
  }
}

TEST(RunBatch, AbortCancelsTheRequestsInFlight) {
  FakeHandler handler;
  handler.Hold("0");  // never released: only an abort ends the run
  const std::string input = EchoLines(10, "r");
  std::istringstream in(input);
  std::ostringstream out;
  BatchOptions options;
  options.max_in_flight = 3;
  options.progress_interval_s = 0.01;
  options.abort = [&handler] { return handler.handled() >= 5; };
  const absl::StatusOr<BatchProgress> done = RunBatch(handler, in, out, options);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->stopped);
  const std::vector<Json> lines = OutputLines(out.str());
  ASSERT_EQ(static_cast<int64_t>(lines.size()), done->lines);
  EXPECT_LT(lines.size(), 10u);
  EXPECT_EQ(lines[0]["custom_id"], "r0");
  EXPECT_EQ(lines[0]["error"]["code"], "batch_cancelled");  // the held one, cancelled
  EXPECT_GE(done->cancelled, 1);
  EXPECT_EQ(done->succeeded + done->cancelled, done->lines);
}

// A server going down pauses its batch (with or without cancelling what is in flight); the
// next run skips what the first wrote: together they write exactly one uninterrupted run's
// output and error files, each request answered once.
TEST(RunBatch, APausedRunAndOneSkippingWhatItWroteWriteTheWholeRunsLines) {
  // 30 lines, every 7th failing, and a repeat of a custom_id the second run skips.
  const std::string input = EchoLines(30, "r", /*fail_every=*/7) + Line("r1", {{"echo", "x"}});
  auto run = [&](FakeHandler& handler, std::ostream& out, std::ostream& errors,
                 BatchOptions options) {
    std::istringstream in(input);
    options.max_in_flight = 4;  // more than a 2-request handler takes: 429s wait to be re-sent
    options.progress_interval_s = 0.01;
    options.id_prefix = "b-";
    options.error_out = &errors;
    absl::StatusOr<BatchProgress> done = RunBatch(handler, in, out, options);
    EXPECT_TRUE(done.ok()) << done.status();
    return done.value_or(BatchProgress{});
  };
  std::ostringstream whole_out, whole_errors;
  FakeHandler whole_handler(/*queue_limit=*/2);
  run(whole_handler, whole_out, whole_errors, {});
  for (const bool abort : {false, true}) {
    SCOPED_TRACE(abort ? "in-flight requests cancelled" : "in-flight requests finish");
    std::ostringstream out, errors;
    FakeHandler first(/*queue_limit=*/2);
    if (abort) first.Hold("5");  // never finishes: only the abort ends the run
    BatchOptions paused;
    paused.pause = [&first] { return first.handled() >= 12; };
    if (abort) {
      // Once every line before the held one is written (429 retries count as handled, so a
      // count of requests would not say when on a slow machine).
      auto written = std::make_shared<std::atomic<int64_t>>(0);
      paused.on_progress = [written](const BatchProgress& p) { *written = p.finished; };
      paused.pause = [written] { return *written >= 5; };
      paused.abort = paused.pause;
    }
    const BatchProgress p = run(first, out, errors, paused);
    EXPECT_TRUE(p.paused);
    EXPECT_FALSE(p.stopped);
    EXPECT_EQ(p.cancelled, 0);
    ASSERT_LT(p.finished, 31);
    if (abort) {
      EXPECT_EQ(p.finished, 5);  // up to the held line
    }
    EXPECT_EQ(OutputLines(out.str()).size() + OutputLines(errors.str()).size(),
              static_cast<size_t>(p.finished));
    FakeHandler second(/*queue_limit=*/2);
    BatchOptions resumed;
    resumed.written_before.assign(static_cast<size_t>(p.finished), true);
    const BatchProgress q = run(second, out, errors, resumed);
    EXPECT_FALSE(q.paused);
    EXPECT_EQ(q.skipped, p.finished);
    EXPECT_EQ(q.lines, 31);
    EXPECT_EQ(q.finished, 31);
    EXPECT_EQ(out.str(), whole_out.str());
    EXPECT_EQ(errors.str(), whole_errors.str());
    for (const Json& body : second.seen_bodies_) {  // nothing the first run wrote is sent again
      if (!body.contains("echo") || body["echo"] == "x") continue;
      EXPECT_GE(std::stoi(body["echo"].get<std::string>()), p.finished) << body.dump();
    }
  }
  EXPECT_THAT(whole_errors.str(), HasSubstr("custom_id 'r1' repeats line 2's"));
}

// A run carrying on after lines were checked: the requests whose lines were kept are neither
// sent nor written — wherever they are — and every other one is, once.
TEST(RunBatch, RequestsWrittenBeforeAreSkippedWhereverTheyAre) {
  FakeHandler handler(/*queue_limit=*/2);
  const std::string input = EchoLines(12, "r");
  std::istringstream in(input);
  std::ostringstream out;
  BatchOptions options;
  options.max_in_flight = 3;
  options.max_waiting_lines = 2;  // skipped lines wait for earlier ones like any other
  options.written_before = {true, true, false, true, true, true, true, false, true};  // 9 of 12
  const absl::StatusOr<BatchProgress> done = RunBatch(handler, in, out, options);
  ASSERT_TRUE(done.ok()) << done.status();
  std::vector<std::string> ids;
  for (const Json& line : OutputLines(out.str())) ids.push_back(line["custom_id"]);
  EXPECT_THAT(ids, ::testing::ElementsAre("r2", "r7", "r9", "r10", "r11"));
  std::vector<std::string> sent;
  for (const Json& body : handler.seen_bodies_) sent.push_back(body["echo"]);
  std::sort(sent.begin(), sent.end());
  sent.erase(std::unique(sent.begin(), sent.end()), sent.end());  // 429s are sent again
  EXPECT_THAT(sent, ::testing::ElementsAre("10", "11", "2", "7", "9"));
  EXPECT_EQ(done->lines, 12);
  EXPECT_EQ(done->skipped, 7);
  EXPECT_EQ(done->finished, 12);
  EXPECT_EQ(done->succeeded, 5);
}

// OpenAI's completion window: past it the requests in flight finish, every line not sent (the
// ones waiting after a 429 and the rest of the input) is a batch_expired error line.
TEST(RunBatch, AnExpiredRunWritesTheUnsentLinesAsExpired) {
  FakeHandler handler(/*queue_limit=*/2);
  const std::string input = EchoLines(30, "r", /*fail_every=*/7);
  std::istringstream in(input);
  std::ostringstream out, errors;
  BatchOptions options;
  options.max_in_flight = 4;
  options.error_out = &errors;
  options.expire = [&handler] { return handler.handled() >= 8; };
  const absl::StatusOr<BatchProgress> done = RunBatch(handler, in, out, options);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->expired_run);
  EXPECT_FALSE(done->stopped);
  EXPECT_EQ(done->lines, 30);
  EXPECT_EQ(done->finished, 30);
  EXPECT_GT(done->expired, 10);
  EXPECT_EQ(done->succeeded + done->failed + done->expired, 30);
  const std::vector<Json> answered = OutputLines(out.str());
  const std::vector<Json> rest = OutputLines(errors.str());
  EXPECT_EQ(static_cast<int64_t>(answered.size()), done->succeeded);
  int64_t expired = 0;
  for (const Json& line : rest) {
    if (line["error"].is_null()) continue;
    EXPECT_EQ(line["error"]["code"], "batch_expired");
    ++expired;
  }
  EXPECT_EQ(expired, done->expired);
  EXPECT_LE(handler.handled(), 8 + 4);  // nothing sent once expired but what was in flight
  EXPECT_EQ(rest.back()["custom_id"], "r29");
}

TEST(RunBatch, ADefaultPriorityGoesToBodiesThatSetNone) {
  FakeHandler handler;
  const std::string input = absl::StrCat(Line("a", {{"echo", "1"}}), "\n",
                                         Line("b", {{"echo", "2"}, {"priority", -3}}), "\n");
  std::istringstream in(input);
  std::ostringstream out;
  BatchOptions options;
  options.default_priority = 5;
  ASSERT_TRUE(RunBatch(handler, in, out, options).ok());
  ASSERT_EQ(handler.seen_bodies_.size(), 2u);
  EXPECT_EQ(handler.seen_bodies_[0]["priority"], 5);
  EXPECT_EQ(handler.seen_bodies_[1]["priority"], -3);
  std::istringstream again(input);
  ASSERT_TRUE(RunBatch(handler, again, out, BatchOptions{}).ok());
  EXPECT_FALSE(handler.seen_bodies_[2].contains("priority"));  // unset: as written
}

// A long first request: later lines finish and wait for it, up to max_waiting_lines; then no
// more lines are read until it finishes (bounded memory), and all come out in order.
TEST(RunBatch, FinishedLinesWaitingForAnEarlierOneAreBounded) {
  FakeHandler handler;
  handler.Hold("0");
  const std::string input = EchoLines(40, "r");
  std::istringstream in(input);
  std::ostringstream out;
  BatchOptions options;
  options.max_in_flight = 2;
  options.max_waiting_lines = 3;
  absl::StatusOr<BatchProgress> done;
  std::thread runner([&] { done = RunBatch(handler, in, out, options); });
  // Wait until the runner stops reading (nothing new handled for a while).
  int last = -1;
  for (int quiet = 0; quiet < 50; ++quiet) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (handler.handled() != last) quiet = 0;
    last = handler.handled();
  }
  EXPECT_EQ(handler.handled(), 1 + 3);  // the held one and the three finished behind it
  handler.Release();
  runner.join();
  ASSERT_TRUE(done.ok()) << done.status();
  const std::vector<Json> lines = OutputLines(out.str());
  ASSERT_EQ(lines.size(), 40u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(lines[i]["custom_id"], absl::StrCat("r", i));
}

TEST(RunBatch, ProgressIsReportedAndAFailedWriteIsAnError) {
  FakeHandler handler;
  const std::string input = Line("a", {{"echo", "1"}}) + "\n" + Line("b", {{"echo", "2"}}) + "\n";
  std::istringstream in(input);
  std::ostringstream out;
  std::vector<BatchProgress> reports;
  BatchOptions options;
  options.progress_interval_s = 0.0005;
  options.on_progress = [&reports](const BatchProgress& p) { reports.push_back(p); };
  ASSERT_TRUE(RunBatch(handler, in, out, options).ok());
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().finished, 2);
  EXPECT_EQ(reports.back().in_flight, 0);
  EXPECT_TRUE(reports.back().input_done);
  EXPECT_TRUE(std::any_of(reports.begin(), reports.end() - 1,
                          [](const BatchProgress& p) { return p.in_flight > 0; }));

  std::istringstream in2(input);
  std::ostringstream broken;
  broken.setstate(std::ios::badbit);
  const absl::StatusOr<BatchProgress> failed = RunBatch(handler, in2, broken, BatchOptions{});
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("writing output line 1 failed"));
}

}  // namespace
}  // namespace strata::batch
