#include "server/request_timing_recorder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata::server {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::Pointwise;

StreamEvent Tokens(int n, int64_t cumulative) {
  StreamEvent e;
  for (int i = 0; i < n; ++i) e.token_ids.push_back(7);
  e.num_prompt_tokens = 12;
  e.num_cached_tokens = 4;
  e.num_output_tokens = cumulative;
  return e;
}

TEST(RequestTimingRecorderTest, MeasuresFirstTokenGapsAndEndToEnd) {
  RequestTimingRecorder rec("req-7", 100.0);
  rec.OnEvent(Tokens(1, 1), 100.5);   // first token after 0.5 s
  rec.OnEvent(Tokens(1, 2), 100.75);  // gap 0.25
  rec.OnEvent(Tokens(2, 4), 101.25);  // two tokens in 0.5 s: gaps 0.25, 0.25
  EXPECT_FALSE(rec.finished());
  StreamEvent last;
  last.finish = FinishReason::kLength;
  last.num_output_tokens = 4;
  rec.OnEvent(last, 101.5);
  ASSERT_TRUE(rec.finished());

  const RequestTimings& t = rec.timings();
  EXPECT_EQ(t.request_id, "req-7");
  EXPECT_EQ(t.finished_reason, "length");
  EXPECT_DOUBLE_EQ(*t.ttft_seconds, 0.5);
  EXPECT_THAT(t.inter_token_seconds, Pointwise(DoubleNear(1e-12), {0.25, 0.25, 0.25}));
  EXPECT_DOUBLE_EQ(*t.decode_seconds, 0.75);
  EXPECT_DOUBLE_EQ(t.e2e_seconds, 1.5);
  EXPECT_EQ(t.num_prompt_tokens, 12);
  EXPECT_EQ(t.num_cached_tokens, 4);
  EXPECT_EQ(t.num_generation_tokens, 4);
  EXPECT_FALSE(t.queue_seconds.has_value());
  EXPECT_FALSE(t.prefill_seconds.has_value());
}

TEST(RequestTimingRecorderTest, QueueTimeFromTheEngineSplitsTheTimeToFirstToken) {
  RequestTimingRecorder rec("r", 10.0);
  StreamEvent first = Tokens(1, 1);
  first.queued_ms = 200.0;  // scheduled 0.2 s after submission
  rec.OnEvent(first, 10.5);
  ASSERT_TRUE(rec.timings().queue_seconds.has_value());
  EXPECT_DOUBLE_EQ(*rec.timings().queue_seconds, 0.2);
  ASSERT_TRUE(rec.timings().prefill_seconds.has_value());
  EXPECT_NEAR(*rec.timings().prefill_seconds, 0.3, 1e-12);
  StreamEvent last;
  last.finish = FinishReason::kStop;
  last.queued_ms = 200.0;
  rec.OnEvent(last, 11.0);
  EXPECT_DOUBLE_EQ(*rec.timings().queue_seconds, 0.2);
  EXPECT_NEAR(*rec.timings().prefill_seconds, 0.3, 1e-12);
}

TEST(RequestTimingRecorderTest, PrefillTimeIsNeverNegative) {
  // The engine's clock started a little before the front end's: its queue time may exceed the
  // measured time to first token by that offset.
  RequestTimingRecorder rec("r", 10.0);
  StreamEvent first = Tokens(1, 1);
  first.queued_ms = 30.0;
  rec.OnEvent(first, 10.02);
  EXPECT_DOUBLE_EQ(*rec.timings().prefill_seconds, 0.0);
}

TEST(RequestTimingRecorderTest, QueueTimeOfARequestThatEndedBeforeItsFirstToken) {
  RequestTimingRecorder rec("r", 10.0);
  StreamEvent abort;
  abort.finish = FinishReason::kAbort;
  abort.queued_ms = 50.0;  // scheduled, then aborted before a token
  rec.OnEvent(abort, 10.3);
  EXPECT_DOUBLE_EQ(*rec.timings().queue_seconds, 0.05);
  EXPECT_FALSE(rec.timings().prefill_seconds.has_value());
}

TEST(RequestTimingRecorderTest, EndedTakesTheFrontEndsReasonAndTheTimeSoFar) {
  RequestTimingRecorder rec("r", 10.0);
  rec.OnEvent(Tokens(1, 1), 10.4);
  // Cancelled before a terminal event: "abort", end to end until now.
  const RequestTimings cancelled = rec.Ended("abort", 12.0);
  EXPECT_EQ(cancelled.finished_reason, "abort");
  EXPECT_DOUBLE_EQ(cancelled.e2e_seconds, 2.0);
  EXPECT_NEAR(*cancelled.ttft_seconds, 0.4, 1e-12);
  // Finished: the terminal event's end to end, the front end's reason (a stop string).
  StreamEvent last;
  last.finish = FinishReason::kAbort;
  rec.OnEvent(last, 11.0);
  const RequestTimings stopped = rec.Ended("stop", 12.0);
  EXPECT_EQ(stopped.finished_reason, "stop");
  EXPECT_DOUBLE_EQ(stopped.e2e_seconds, 1.0);
}

TEST(RequestTimingRecorderTest, ARequestAbortedBeforeSchedulingKeepsItsPromptLength) {
  // Aborted while waiting (shutdown, a client gone): the engine's abort carries no counts.
  RequestTimingRecorder rec("r", 10.0, /*num_prompt_tokens=*/37);
  StreamEvent abort;
  abort.finish = FinishReason::kAbort;
  rec.OnEvent(abort, 10.5);
  EXPECT_EQ(rec.timings().num_prompt_tokens, 37);
  EXPECT_EQ(rec.Ended("abort", 11.0).num_prompt_tokens, 37);
  // Cancelled by the front end before any event: Ended alone.
  RequestTimingRecorder cancelled("c", 10.0, /*num_prompt_tokens=*/5);
  EXPECT_EQ(cancelled.Ended("abort", 10.1).num_prompt_tokens, 5);
}

TEST(RequestTimingRecorderTest, TokensArrivingWithTheFirstHaveZeroGaps) {
  RequestTimingRecorder rec("r", 0.0);
  StreamEvent e = Tokens(3, 3);
  e.finish = FinishReason::kStop;
  rec.OnEvent(e, 2.0);
  EXPECT_EQ(rec.timings().finished_reason, "stop");
  EXPECT_THAT(rec.timings().inter_token_seconds, ElementsAre(0.0, 0.0));
  EXPECT_DOUBLE_EQ(*rec.timings().decode_seconds, 0.0);
  EXPECT_EQ(rec.timings().num_generation_tokens, 3);
}

TEST(RequestTimingRecorderTest, ErrorBeforeAnyTokenHasNoFirstTokenTime) {
  RequestTimingRecorder rec("r", 10.0);
  StreamEvent e;
  e.error = absl::ResourceExhaustedError("no room");
  rec.OnEvent(e, 10.25);
  ASSERT_TRUE(rec.finished());
  EXPECT_EQ(rec.timings().finished_reason, "error");
  EXPECT_FALSE(rec.timings().ttft_seconds.has_value());
  EXPECT_FALSE(rec.timings().decode_seconds.has_value());
  EXPECT_DOUBLE_EQ(rec.timings().e2e_seconds, 0.25);
  EXPECT_TRUE(rec.timings().inter_token_seconds.empty());
}

TEST(RequestTimingRecorderTest, EventsAfterTheEndAreIgnored) {
  RequestTimingRecorder rec("r", 0.0);
  StreamEvent abort;
  abort.finish = FinishReason::kAbort;
  rec.OnEvent(abort, 1.0);
  rec.OnEvent(Tokens(1, 1), 2.0);
  EXPECT_EQ(rec.timings().finished_reason, "abort");
  EXPECT_EQ(rec.timings().num_generation_tokens, 0);
  EXPECT_DOUBLE_EQ(rec.timings().e2e_seconds, 1.0);
}

TEST(RequestTimingRecorderTest, FeedsMetricsThatCountTheRequest) {
  Metrics metrics("m", 0);
  RequestTimingRecorder rec("r", 0.0);
  StreamEvent e = Tokens(1, 1);
  e.finish = FinishReason::kStop;
  rec.OnEvent(e, 0.003);
  metrics.OnRequestFinished(rec.timings());
  const std::string text = metrics.Serialize();
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "strata:time_to_first_token_seconds_bucket{model_name=\"m\",rank=\"0\","
                        "le=\"0.005\"} 1\n"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "strata:request_success_total{finished_reason=\"stop\",model_name=\"m\","
                        "rank=\"0\"} 1\n"));
}

}  // namespace
}  // namespace strata::server
