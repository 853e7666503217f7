// The engine loop's timing reports over the scheduler's fake model: each step reported once to
// EngineLoopOptions::on_step with its tokens, and every stream event timed (elapsed since
// submission, the queue time before the request's first step).
#include "server/engine_loop.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "scheduler/testing/fake_executor.h"
#include "server/testing/engine_loop_testing.h"

namespace strata::server {
namespace {

using testing::CollectEvents;
using testing::FakeModelConfig;

constexpr int32_t kVocab = testing::kFakeVocab;
constexpr auto kStepSleep = std::chrono::milliseconds(5);
constexpr double kStepSleepMs = 5.0;

// The fake model, taking at least kStepSleep per step so that times have a known lower bound.
class SlowFakeExecutor : public engine::StepExecutor {
 public:
  SlowFakeExecutor()
      : fake_(FakeModelConfig().num_blocks, FakeModelConfig().block_size,
              FakeModelConfig().num_slots, 0, kVocab) {}
  engine::StepResult Execute(const engine::StepPlan& plan) override {
    std::this_thread::sleep_for(kStepSleep);
    return fake_.Execute(plan);
  }

 private:
  scheduler::testing::FakeExecutor fake_;
};

std::unique_ptr<EngineLoop> MakeLoop(int max_num_seqs, EngineLoopOptions options = {}) {
  return std::make_unique<EngineLoop>(
      std::make_unique<scheduler::Scheduler>(FakeModelConfig(max_num_seqs)),
      std::make_unique<SlowFakeExecutor>(), std::move(options));
}

scheduler::Request MakeRequest(const std::string& id, int prompt_tokens, int max_tokens) {
  scheduler::Request r;
  r.request_id = id;
  for (int t = 0; t < prompt_tokens; ++t) r.prompt.push_back((7 * t + 3) % kVocab);
  r.max_tokens = max_tokens;
  return r;
}

struct Report {
  EngineStats before, after;
};

TEST(EngineLoopTest, ReportsEachStepOnceWithItsTokens) {
  std::mutex mu;
  std::vector<Report> reports;
  EngineLoopOptions options;
  options.on_step = [&](int rank, const EngineStats& before, const EngineStats& after) {
    EXPECT_EQ(rank, 0);
    std::lock_guard<std::mutex> lock(mu);
    reports.push_back({before, after});
  };
  std::unique_ptr<EngineLoop> loop = MakeLoop(4, std::move(options));
  loop->Start();
  // 100 prompt tokens need two chunks of 64: prefill and decode steps mix.
  const std::vector<scheduler::Request> requests = {
      MakeRequest("a", 100, 5), MakeRequest("b", 9, 7), MakeRequest("c", 30, 1)};
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const scheduler::Request& r : requests) streams.push_back(*loop->Submit(r));
  for (auto& s : streams) CollectEvents(*s);
  loop->Stop();

  const EngineStats final_stats = loop->stats();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(static_cast<int64_t>(reports.size()), final_stats.num_steps);
  int64_t prefill_tokens = 0, generated_tokens = 0;
  for (size_t i = 0; i < reports.size(); ++i) {
    const Report& r = reports[i];
    EXPECT_EQ(r.after.num_steps, r.before.num_steps + 1) << "report " << i;
    if (i > 0) {
      EXPECT_EQ(r.before.num_steps, reports[i - 1].after.num_steps) << "report " << i;
    }
    EXPECT_GE(r.after.last_step_ms, kStepSleepMs) << "report " << i;
    const int64_t step_tokens =
        (r.after.scheduler.num_prefill_tokens_total - r.before.scheduler.num_prefill_tokens_total) +
        (r.after.scheduler.num_decode_tokens_total - r.before.scheduler.num_decode_tokens_total);
    EXPECT_GT(step_tokens, 0) << "report " << i;
    EXPECT_LE(step_tokens, 64) << "report " << i;  // max_num_batched_tokens
    prefill_tokens +=
        r.after.scheduler.num_prefill_tokens_total - r.before.scheduler.num_prefill_tokens_total;
    generated_tokens += r.after.num_generated_tokens_total - r.before.num_generated_tokens_total;
  }
  EXPECT_EQ(prefill_tokens, 100 + 9 + 30);
  EXPECT_EQ(generated_tokens, 5 + 7 + 1);
}

TEST(EngineLoopTest, EventsCarryElapsedAndQueueTimes) {
  // One sequence at a time: "second" waits in the queue while "first" runs its 6 steps.
  std::unique_ptr<EngineLoop> loop = MakeLoop(1);
  loop->Start();
  std::shared_ptr<RequestStream> first = *loop->Submit(MakeRequest("first", 10, 6));
  std::shared_ptr<RequestStream> second = *loop->Submit(MakeRequest("second", 10, 3));
  const std::vector<StreamEvent> a = CollectEvents(*first);
  const std::vector<StreamEvent> b = CollectEvents(*second);
  loop->Stop();

  for (const auto* events : {&a, &b}) {
    ASSERT_FALSE(events->empty());
    const std::optional<double> queued = events->front().queued_ms;
    ASSERT_TRUE(queued.has_value());
    EXPECT_GE(*queued, 0.0);
    double previous = 0.0;
    for (const StreamEvent& e : *events) {
      EXPECT_EQ(e.queued_ms, queued) << "the same queue time on every event";
      EXPECT_GE(e.elapsed_ms, previous);
      previous = e.elapsed_ms;
    }
    // The first token comes after the request's first (≥ 5 ms) step.
    EXPECT_GE(events->front().elapsed_ms, *queued + kStepSleepMs);
  }
  // "first" ran 6 steps of ≥ 5 ms before "second" could start.
  EXPECT_GE(*b.front().queued_ms, 6 * kStepSleepMs);
  EXPECT_LT(*a.front().queued_ms, *b.front().queued_ms);
  EXPECT_GE(a.back().elapsed_ms, 6 * kStepSleepMs);
}

TEST(EngineLoopTest, PrefillProgressPrecedesTheFirstTokenOnePerChunk) {
  scheduler::SchedulerConfig config = FakeModelConfig(4);
  config.enable_prefix_caching = true;
  config.has_kda_layers = false;  // MLA only: a hit needs no KDA checkpoint
  auto loop =
      std::make_unique<EngineLoop>(std::make_unique<scheduler::Scheduler>(config),
                                   std::make_unique<SlowFakeExecutor>(), EngineLoopOptions{});
  loop->Start();
  // 200 prompt tokens in chunks of 64: 4 chunks (64, 128, 192, 200), the last one samples.
  scheduler::Request asked = MakeRequest("asked", 200, 2);
  asked.report_prefill_progress = true;
  const std::vector<StreamEvent> a = CollectEvents(**loop->Submit(asked));
  const std::vector<StreamEvent> b = CollectEvents(**loop->Submit(MakeRequest("plain", 200, 2)));
  // The same prompt again: its full blocks (192 tokens) come from the prefix cache.
  const std::vector<StreamEvent> c = CollectEvents(**loop->Submit(asked));
  loop->Stop();

  std::vector<int64_t> processed;
  for (const StreamEvent& e : a) {
    if (!e.progress_only()) break;
    EXPECT_EQ(e.progress->total, 200);
    EXPECT_EQ(e.progress->cached, 0);
    EXPECT_GE(e.progress->time_ms, 0.0);
    processed.push_back(e.progress->processed);
  }
  EXPECT_THAT(processed, ::testing::ElementsAre(64, 128, 192, 200));
  ASSERT_EQ(a.size(), 4u + 2u);
  EXPECT_EQ(a[4].token_ids.size(), 1u);  // then the tokens, no more progress
  EXPECT_FALSE(a[5].progress.has_value());
  for (const StreamEvent& e : b) EXPECT_FALSE(e.progress.has_value()) << "not asked for";
  ASSERT_FALSE(c.empty());
  ASSERT_TRUE(c[0].progress_only());
  EXPECT_EQ(c[0].progress->cached, 192);
  EXPECT_EQ(c[0].progress->processed, 200);  // one chunk: the 8 tokens past the cached blocks
  EXPECT_FALSE(c[1].progress.has_value());
}

TEST(EngineLoopTest, RequestCancelledWhileWaitingHasNoQueueTime) {
  std::unique_ptr<EngineLoop> loop = MakeLoop(1);
  loop->Start();
  std::shared_ptr<RequestStream> running = *loop->Submit(MakeRequest("running", 10, 40));
  std::shared_ptr<RequestStream> waiting = *loop->Submit(MakeRequest("waiting", 10, 3));
  // Once "running" has a token it holds the only sequence place; "waiting" is still queued.
  std::optional<StreamEvent> token = running->Next(absl::Seconds(20));
  ASSERT_TRUE(token.has_value());
  loop->Cancel("waiting");
  const std::vector<StreamEvent> events = CollectEvents(*waiting);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].finish, FinishReason::kAbort);
  EXPECT_FALSE(events[0].queued_ms.has_value());
  EXPECT_GT(events[0].elapsed_ms, 0.0);
  loop->Cancel("running");
  CollectEvents(*running);
  loop->Stop();
}

// The fake model taking 1 ms per step plus 0.1 ms per prompt token (chunks of more than one
// token), so that prompt chunks cost time in proportion to their size, as on a CPU.
class PrefillCostFakeExecutor : public engine::StepExecutor {
 public:
  explicit PrefillCostFakeExecutor(const scheduler::SchedulerConfig& c)
      : fake_(c.num_blocks, c.block_size, c.num_slots, 0, kVocab) {}
  engine::StepResult Execute(const engine::StepPlan& plan) override {
    int64_t prompt_tokens = 0;
    for (const engine::ScheduledSequence& s : plan.sequences) {
      if (s.token_ids.size() > 1) prompt_tokens += static_cast<int64_t>(s.token_ids.size());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(1000 + 100 * prompt_tokens));
    return fake_.Execute(plan);
  }

 private:
  scheduler::testing::FakeExecutor fake_;
};

// Prompt tokens of each step that also decoded, while "long" (900 tokens) arrives as "short"
// generates.
std::vector<int64_t> PrefillTokensOfDecodingSteps(double target_itl_ms) {
  scheduler::SchedulerConfig c = FakeModelConfig(4);
  c.max_num_batched_tokens = 512;
  c.max_model_len = 1024;
  c.num_blocks = 128;
  std::mutex mu;
  std::vector<int64_t> prefill;
  EngineLoopOptions options;
  options.target_itl_ms = target_itl_ms;
  options.on_step = [&](int, const EngineStats&, const EngineStats& after) {
    std::lock_guard<std::mutex> lock(mu);
    if (after.scheduler.num_decode_tokens > 0 && after.scheduler.num_prefill_tokens > 0) {
      prefill.push_back(after.scheduler.num_prefill_tokens);
    }
  };
  EngineLoop loop(std::make_unique<scheduler::Scheduler>(c),
                  std::make_unique<PrefillCostFakeExecutor>(c), std::move(options));
  loop.Start();
  std::shared_ptr<RequestStream> first = *loop.Submit(MakeRequest("short", 16, 40));
  std::optional<StreamEvent> token = first->Next(absl::Seconds(20));  // "short" now decodes
  EXPECT_TRUE(token.has_value());
  std::shared_ptr<RequestStream> second = *loop.Submit(MakeRequest("long", 900, 1));
  const std::vector<StreamEvent> events = CollectEvents(*second);
  EXPECT_EQ(events.back().finish, FinishReason::kLength);
  CollectEvents(*first);
  loop.Stop();
  std::lock_guard<std::mutex> lock(mu);
  return prefill;
}

TEST(EngineLoopTest, TargetItlCutsPromptChunksWhileOthersDecode) {
  // Off: the long prompt takes all the budget the decode leaves.
  EXPECT_THAT(PrefillTokensOfDecodingSteps(0), ::testing::Contains(511));
  // 20 ms: at ≥ 0.1 ms a token (sleeps only get longer) (20 − 1) / 0.1 = 190 tokens a step fit;
  // a decode-only step slowed by a busy machine makes the pacer take more of a mixed step for
  // the decodes and so allow more tokens, but far from the 511 unpaced (≤ 320 here). Never fewer
  // than 64 while the prompt has them; the first chunk may take the pacer's initial 256 if no
  // prompt step was measured yet.
  const std::vector<int64_t> paced = PrefillTokensOfDecodingSteps(20);
  ASSERT_FALSE(paced.empty());
  int64_t total = 0;
  for (size_t i = 0; i < paced.size(); ++i) {
    EXPECT_LE(paced[i], i == 0 ? 256 : 320) << "step " << i;
    if (i + 1 < paced.size()) {
      EXPECT_GE(paced[i], 64) << "step " << i;
    }
    total += paced[i];
  }
  EXPECT_EQ(total, 900);
}

// Replicas (ranks without a gate): requests that each finish before the next is submitted see
// every rank idle; they alternate rather than all going to rank 0. Overlapping ones go to the
// rank with fewer unfinished requests.
TEST(EngineLoopTest, IdleRanksTakeSequentialRequestsInTurn) {
  std::vector<EngineRank> ranks(2);
  for (EngineRank& r : ranks) {
    r.scheduler = std::make_unique<scheduler::Scheduler>(FakeModelConfig(4));
    r.executor = std::make_unique<SlowFakeExecutor>();
  }
  EngineLoop loop(std::move(ranks), EngineLoopOptions{});
  loop.Start();
  for (int i = 0; i < 4; ++i) {  // each takes 20 steps of 5 ms
    auto stream = loop.Submit(MakeRequest("seq" + std::to_string(i), 4, 20));
    ASSERT_TRUE(stream.ok());
    EXPECT_EQ(loop.rank_stats(i % 2).num_unfinished, 1) << i;
    EXPECT_EQ(loop.rank_stats(1 - i % 2).num_unfinished, 0) << i;
    CollectEvents(**stream);
  }
  // Long requests (40 steps of 5 ms) overlap: rank 0 takes the first (its turn), rank 1 the
  // next (less loaded), and the tie that follows goes to rank 0 (the turn after rank 1).
  auto busy = loop.Submit(MakeRequest("busy", 4, 40));
  ASSERT_TRUE(busy.ok());
  EXPECT_EQ(loop.rank_stats(0).num_unfinished, 1);
  auto a = loop.Submit(MakeRequest("a", 4, 40));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(loop.rank_stats(1).num_unfinished, 1);
  auto b = loop.Submit(MakeRequest("b", 4, 40));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(loop.rank_stats(0).num_unfinished + loop.rank_stats(1).num_unfinished, 3);
  EXPECT_EQ(loop.rank_stats(0).num_unfinished, 2);
  for (auto* s : {&busy, &a, &b}) CollectEvents(***s);
  loop.Stop();
}

TEST(EngineLoopTest, StatsBeforeTheFirstStepShowThePromptCapItWillUse) {
  for (const double target_ms : {0.0, 20.0}) {
    scheduler::SchedulerConfig c = FakeModelConfig(4);
    c.max_num_batched_tokens = 512;
    EngineLoopOptions options;
    options.target_itl_ms = target_ms;
    EngineLoop loop(std::make_unique<scheduler::Scheduler>(c),
                    std::make_unique<PrefillCostFakeExecutor>(c), std::move(options));
    // The pacer's first cap (256 until a prompt step was timed); 0 = none when pacing is off.
    EXPECT_EQ(loop.rank_stats(0).scheduler.prefill_tokens_with_decodes, target_ms > 0 ? 256 : 0);
  }
}

}  // namespace
}  // namespace strata::server
