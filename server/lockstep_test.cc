// Engine loops of several data-parallel ranks in lockstep (server/lockstep.h), with threads as
// ranks over the in-process fake communicator. The executor stands in for the model's MoE
// exchange with one Barrier per Execute, so a rank that skipped a step (or stepped alone)
// would meet a different collective on its peer and fail.
#include "server/lockstep.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dist/testing/fake_communicator.h"
#include "scheduler/testing/fake_executor.h"
#include "server/engine_loop.h"
#include "server/testing/engine_loop_testing.h"

namespace strata::server {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr int32_t kVocab = testing::kFakeVocab;
// Collective timeout where none is expected: a lockstep bug fails in seconds, not minutes.
constexpr std::chrono::milliseconds kTimeout{10000};

scheduler::SchedulerConfig TestConfig() { return testing::FakeModelConfig(); }

// The scheduler's fake model, plus one Barrier per step in place of the MoE exchange.
class LockstepExecutor : public engine::StepExecutor {
 public:
  explicit LockstepExecutor(dist::Communicator* comm)
      : fake_(TestConfig().num_blocks, TestConfig().block_size, TestConfig().num_slots, 0, kVocab),
        comm_(comm) {}

  engine::StepResult Execute(const engine::StepPlan& plan) override {
    plan_sizes_.push_back(static_cast<int>(plan.sequences.size()));
    if (comm_ != nullptr) {
      absl::Status s = comm_->Barrier();
      if (!s.ok()) errors_.push_back(std::string(s.message()));
    }
    return fake_.Execute(plan);
  }
  // Read after the loop stopped.
  const std::vector<int>& plan_sizes() const { return plan_sizes_; }
  const std::vector<std::string>& errors() const { return errors_; }
  const std::vector<std::string>& plan_errors() const { return fake_.errors(); }

 private:
  scheduler::testing::FakeExecutor fake_;
  dist::Communicator* comm_;
  std::vector<int> plan_sizes_;
  std::vector<std::string> errors_;
};

// Counts agreements (to check an idle group does not spin).
class CountingGate : public StepGate {
 public:
  explicit CountingGate(dist::Communicator* comm) : gate_(comm) {}
  int rank() const override { return gate_.rank(); }
  int world_size() const override { return gate_.world_size(); }
  absl::StatusOr<GateDecision> Agree(const GateVote& vote) override {
    ++count_;
    return gate_.Agree(vote);
  }
  std::atomic<int64_t>& count() { return count_; }

 private:
  CommunicatorStepGate gate_;
  std::atomic<int64_t> count_{0};
};

struct GateErrors {
  std::mutex mu;
  std::vector<std::string> messages;
  std::atomic<int> count{0};
  std::function<void(int, const absl::Status&)> Handler() {
    return [this](int rank, const absl::Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back("rank " + std::to_string(rank) + ": " + std::string(s.message()));
      ++count;
    };
  }
};

// One rank of a group: its executor, gate and loop.
struct RankUnderTest {
  LockstepExecutor* executor = nullptr;
  CountingGate* gate = nullptr;
  std::unique_ptr<EngineLoop> loop;
};

RankUnderTest MakeRank(dist::Communicator* comm, EngineLoopOptions options) {
  RankUnderTest r;
  std::vector<EngineRank> ranks(1);
  ranks[0].scheduler = std::make_unique<scheduler::Scheduler>(TestConfig());
  auto executor = std::make_unique<LockstepExecutor>(comm);
  r.executor = executor.get();
  ranks[0].executor = std::move(executor);
  auto gate = std::make_unique<CountingGate>(comm);
  r.gate = gate.get();
  ranks[0].gate = std::move(gate);
  r.loop = std::make_unique<EngineLoop>(std::move(ranks), std::move(options));
  return r;
}

scheduler::Request MakeRequest(int i) {
  scheduler::Request r;
  r.request_id = "req-" + std::to_string(i);
  for (int t = 0; t < 5 + 7 * i; ++t) r.prompt.push_back((13 * i + 5 * t) % kVocab);
  r.max_tokens = 6 + i;
  return r;
}

// Every token of the stream until it ends (fails the test on a timeout or an error).
std::vector<int32_t> Collect(RequestStream& stream) {
  std::vector<int32_t> tokens;
  for (const StreamEvent& e : testing::CollectEvents(stream)) {
    EXPECT_TRUE(e.error.ok()) << e.error;
    tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
  }
  return tokens;
}

void StopTogether(std::vector<EngineLoop*> loops) {
  std::vector<std::thread> threads;
  for (EngineLoop* loop : loops) threads.emplace_back([loop] { loop->Stop(); });
  for (std::thread& t : threads) t.join();
}

TEST(LockstepTest, RankWithoutWorkRunsAnEmptyStepForEveryStepOfItsPeer) {
  dist::testing::FakeGroup group(2, kTimeout);
  GateErrors errors;
  EngineLoopOptions options;
  options.on_gate_error = errors.Handler();
  RankUnderTest a = MakeRank(group.rank(0), options);
  RankUnderTest b = MakeRank(group.rank(1), options);
  a.loop->Start();
  b.loop->Start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) streams.push_back(*a.loop->Submit(MakeRequest(i)));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Collect(*streams[i]),
              scheduler::testing::FakeExecutor::ExpectedOutput(MakeRequest(i), kVocab));
  }
  StopTogether({a.loop.get(), b.loop.get()});

  EXPECT_THAT(errors.messages, ::testing::IsEmpty());
  EXPECT_THAT(a.executor->errors(), ::testing::IsEmpty());
  EXPECT_THAT(a.executor->plan_errors(), ::testing::IsEmpty());
  const EngineStats sa = a.loop->stats(), sb = b.loop->stats();
  EXPECT_GT(sa.num_steps, 0);
  EXPECT_EQ(sa.num_empty_steps, 0);
  EXPECT_EQ(sb.num_steps, sa.num_steps);
  EXPECT_EQ(sb.num_empty_steps, sa.num_steps);
  // Rank 1 executed exactly as many (empty) plans as rank 0 executed plans.
  EXPECT_EQ(b.executor->plan_sizes().size(), a.executor->plan_sizes().size());
  for (int n : b.executor->plan_sizes()) EXPECT_EQ(n, 0);
}

TEST(LockstepTest, BothRanksWorkingProduceEachRequestsOwnOutput) {
  dist::testing::FakeGroup group(2, kTimeout);
  GateErrors errors;
  EngineLoopOptions options;
  options.on_gate_error = errors.Handler();
  RankUnderTest a = MakeRank(group.rank(0), options);
  RankUnderTest b = MakeRank(group.rank(1), options);
  a.loop->Start();
  b.loop->Start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    EngineLoop& loop = i % 2 == 0 ? *a.loop : *b.loop;
    streams.push_back(*loop.Submit(MakeRequest(i)));
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(Collect(*streams[i]),
              scheduler::testing::FakeExecutor::ExpectedOutput(MakeRequest(i), kVocab))
        << "request " << i;
  }
  StopTogether({a.loop.get(), b.loop.get()});
  EXPECT_THAT(errors.messages, ::testing::IsEmpty());
  EXPECT_THAT(b.executor->errors(), ::testing::IsEmpty());
  EXPECT_EQ(a.loop->stats().num_steps, b.loop->stats().num_steps);
  EXPECT_EQ(a.executor->plan_sizes().size(), b.executor->plan_sizes().size());
}

TEST(LockstepTest, IdleGroupPollsAtTheIdleIntervalInsteadOfSpinning) {
  dist::testing::FakeGroup group(2, kTimeout);
  EngineLoopOptions options;
  options.idle_poll = std::chrono::milliseconds(10);
  options.idle_poll_max = std::chrono::milliseconds(10);
  RankUnderTest a = MakeRank(group.rank(0), options);
  RankUnderTest b = MakeRank(group.rank(1), options);
  a.loop->Start();
  b.loop->Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int64_t agreements = a.gate->count().load();
  // ~50 at one per 10 ms; a spinning loop would make tens of thousands.
  EXPECT_GE(agreements, 5);
  EXPECT_LE(agreements, 150);
  // An idle group still wakes up for a request.
  auto stream = *b.loop->Submit(MakeRequest(1));
  EXPECT_EQ(Collect(*stream),
            scheduler::testing::FakeExecutor::ExpectedOutput(MakeRequest(1), kVocab));
  StopTogether({a.loop.get(), b.loop.get()});
  EXPECT_EQ(a.executor->plan_sizes().size(), b.executor->plan_sizes().size());
}

TEST(LockstepTest, SilentPeerFailsTheStepGateWithinTheTimeoutNamingTheRank) {
  dist::testing::FakeGroup group(2, std::chrono::milliseconds(300));
  GateErrors errors;
  EngineLoopOptions options;
  options.on_gate_error = errors.Handler();
  RankUnderTest a = MakeRank(group.rank(0), options);
  RankUnderTest b = MakeRank(group.rank(1), options);  // never started: a silent peer
  const auto start = Clock::now();
  a.loop->Start();
  auto stream = *a.loop->Submit(MakeRequest(0));
  while (errors.count.load() == 0 && Clock::now() - start < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_EQ(errors.count.load(), 1);
  EXPECT_LT(seconds, 5.0);
  EXPECT_THAT(errors.messages[0], HasSubstr("rank 0: step gate all-reduce #1"));
  EXPECT_THAT(errors.messages[0], HasSubstr("rank 1 did not answer"));
  a.loop->Stop();
  // The request accepted before the failure still ends (abort), never hangs.
  std::optional<StreamEvent> last;
  while (std::optional<StreamEvent> e = stream->Next(absl::Seconds(5))) {
    last = e;
    if (e->terminal()) break;
  }
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->finish, FinishReason::kAbort);
}

TEST(LockstepTest, RankStoppedAloneLeavesAfterTheGraceAndItsPeerFailsInBoundedTime) {
  dist::testing::FakeGroup group(2, std::chrono::milliseconds(300));
  GateErrors errors;
  EngineLoopOptions options;
  options.on_gate_error = errors.Handler();
  options.stop_grace = std::chrono::milliseconds(100);
  RankUnderTest a = MakeRank(group.rank(0), options);
  RankUnderTest b = MakeRank(group.rank(1), options);
  a.loop->Start();
  b.loop->Start();
  const auto start = Clock::now();
  a.loop->Stop();  // b keeps running: a waits out the grace, then leaves
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  while (errors.count.load() == 0 && Clock::now() - start < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(errors.count.load(), 1);
  EXPECT_THAT(errors.messages[0], HasSubstr("rank 1:"));
  EXPECT_THAT(errors.messages[0], HasSubstr("rank 0 did not answer"));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  b.loop->Stop();
}

TEST(LockstepTest, LocalRanksOfOneLoopStepTogetherAndShareTheWork) {
  dist::testing::FakeGroup group(2, kTimeout);
  GateErrors errors;
  EngineLoopOptions options;
  options.on_gate_error = errors.Handler();
  std::vector<EngineRank> ranks(2);
  std::vector<LockstepExecutor*> executors;
  for (int i = 0; i < 2; ++i) {
    ranks[i].scheduler = std::make_unique<scheduler::Scheduler>(TestConfig());
    auto executor = std::make_unique<LockstepExecutor>(group.rank(i));
    executors.push_back(executor.get());
    ranks[i].executor = std::move(executor);
    ranks[i].gate = std::make_unique<CommunicatorStepGate>(group.rank(i));
  }
  EngineLoop loop(std::move(ranks), options);
  // Before the loop starts, submissions alternate between the ranks (least loaded first).
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 5; ++i) streams.push_back(*loop.Submit(MakeRequest(i)));
  EXPECT_EQ(loop.rank_stats(0).num_unfinished, 3);
  EXPECT_EQ(loop.rank_stats(1).num_unfinished, 2);
  EXPECT_EQ(loop.stats().num_unfinished, 5);
  loop.Start();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Collect(*streams[i]),
              scheduler::testing::FakeExecutor::ExpectedOutput(MakeRequest(i), kVocab));
  }
  loop.Stop();
  EXPECT_THAT(errors.messages, ::testing::IsEmpty());
  EXPECT_EQ(executors[0]->plan_sizes().size(), executors[1]->plan_sizes().size());
  EXPECT_EQ(loop.rank_stats(0).num_steps, loop.rank_stats(1).num_steps);
  EXPECT_EQ(loop.stats().num_unfinished, 0);
  EXPECT_EQ(loop.stats().scheduler.num_finished_total, 5);
}

TEST(LockstepTest, CancelReachesTheRankThatHoldsTheRequest) {
  std::vector<EngineRank> ranks(2);
  for (int i = 0; i < 2; ++i) {
    ranks[i].scheduler = std::make_unique<scheduler::Scheduler>(TestConfig());
    ranks[i].executor = std::make_unique<LockstepExecutor>(nullptr);
  }
  EngineLoop loop(std::move(ranks), EngineLoopOptions{});
  auto first = *loop.Submit(MakeRequest(0));   // rank 0
  auto second = *loop.Submit(MakeRequest(1));  // rank 1
  loop.Cancel("req-1");
  loop.Start();
  EXPECT_EQ(Collect(*first),
            scheduler::testing::FakeExecutor::ExpectedOutput(MakeRequest(0), kVocab));
  std::optional<StreamEvent> last;
  while (std::optional<StreamEvent> e = second->Next(absl::Seconds(20))) {
    last = e;
    if (e->terminal()) break;
  }
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->finish, FinishReason::kAbort);
  loop.Stop();
  EXPECT_EQ(loop.rank_stats(1).scheduler.num_aborted_total, 1);
  EXPECT_EQ(loop.rank_stats(0).scheduler.num_finished_total, 1);
}

TEST(LockstepDeathTest, CollectiveErrorExitsNonZeroNamingRankAndCollective) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ExitOnCollectiveError(
                  3, "the engine step",
                  absl::UnavailableError("all-reduce (collective #7): rank 1 did not answer")),
              ::testing::ExitedWithCode(kCollectiveFailureExitCode),
              "rank 3: the engine step failed: all-reduce \\(collective #7\\): rank 1 did not "
              "answer");
}

}  // namespace
}  // namespace strata::server
