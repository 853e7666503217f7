// EncoderBudget: the vision tower waits for the engine's steps while the engine is busy, runs
// freely while it is idle, any block size gets through, and Stop releases a waiting tower.
#include "server/frontend/encoder_budget.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace strata::frontend {
namespace {

using std::chrono::milliseconds;

// Take(tokens) on another thread; whether it returned within `wait`.
class Taker {
 public:
  Taker(EncoderBudget& budget, int64_t tokens)
      : thread_([this, &budget, tokens] {
          budget.Take(tokens);
          done_ = true;
        }) {}
  ~Taker() { thread_.join(); }
  bool DoneWithin(milliseconds wait) {
    const auto until = std::chrono::steady_clock::now() + wait;
    while (!done_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    return done_;
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

TEST(EncoderBudgetTest, IdleEngineLeavesTheTowerFree) {
  EncoderBudget budget(100, milliseconds(60000));
  budget.Take(1'000'000);  // no step yet: idle
  budget.OnStep(/*busy=*/false);
  budget.Take(1'000'000);  // the last step left nothing unfinished
  EXPECT_EQ(budget.stats().waits, 0);
}

TEST(EncoderBudgetTest, BusyEngineGrantsAStepsTokensPerStep) {
  EncoderBudget budget(100, milliseconds(60000));
  budget.OnStep(/*busy=*/true);  // balance 100
  budget.Take(60);               // 40 left
  Taker taker(budget, 60);
  EXPECT_FALSE(taker.DoneWithin(milliseconds(100))) << "took more than the steps granted";
  budget.OnStep(/*busy=*/true);  // 140
  EXPECT_TRUE(taker.DoneWithin(milliseconds(5000)));
  EXPECT_EQ(budget.stats().waits, 1);
  EXPECT_EQ(budget.stats().granted_tokens, 200);
}

TEST(EncoderBudgetTest, ABlockLargerThanTwoGrantsRunsOnceTwoAreIn) {
  EncoderBudget budget(100, milliseconds(60000));
  budget.OnStep(true);
  {
    Taker big(budget, 1000);  // needs min(1000, 200)
    EXPECT_FALSE(big.DoneWithin(milliseconds(50)));
    budget.OnStep(true);  // 200
    EXPECT_TRUE(big.DoneWithin(milliseconds(5000)));
  }
  // The balance is now 200 - 1000: the next block waits for the steps that pay it back.
  Taker next(budget, 10);
  for (int i = 0; i < 8; ++i) budget.OnStep(true);  // -800 + 8 · 100 = 0, still short of 10
  EXPECT_FALSE(next.DoneWithin(milliseconds(50)));
  budget.OnStep(true);
  EXPECT_TRUE(next.DoneWithin(milliseconds(5000)));
}

// A waiting tower is released by the engine's last request finishing, and by Stop.
TEST(EncoderBudgetTest, TheEngineGoingIdleAndStopReleaseAWaitingTower) {
  EncoderBudget budget(100, milliseconds(60000));
  for (bool stop : {false, true}) {
    budget.OnStep(true);
    budget.Take(100);  // the balance is 0 again
    Taker taker(budget, 50);
    EXPECT_FALSE(taker.DoneWithin(milliseconds(50))) << stop;
    if (stop) {
      budget.Stop();
    } else {
      budget.OnStep(/*busy=*/false);
    }
    EXPECT_TRUE(taker.DoneWithin(milliseconds(5000))) << stop;
  }
}

TEST(EncoderBudgetTest, ABusyEngineThatStopsSteppingReleasesTheTowerAfterTheSafetyTimeout) {
  EncoderBudget budget(100, milliseconds(100));
  budget.OnStep(true);
  budget.Take(100);
  Taker taker(budget, 50);
  EXPECT_TRUE(taker.DoneWithin(milliseconds(5000)));
}

TEST(EncoderBudgetTest, ZeroGrantNeverWaits) {
  EncoderBudget budget(0, milliseconds(60000));
  budget.OnStep(true);
  budget.Take(1'000'000);
  EXPECT_EQ(budget.stats().waits, 0);
}

}  // namespace
}  // namespace strata::frontend
