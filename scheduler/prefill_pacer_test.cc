// PrefillPacer: the cap it derives from observed step times (prefill_pacer.h).
#include "scheduler/prefill_pacer.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace strata::scheduler {
namespace {

PrefillPacerConfig Config(double target_ms) {
  PrefillPacerConfig c;
  c.target_step_ms = target_ms;
  c.min_tokens = 64;
  c.max_tokens = 2048;
  c.initial_tokens = 256;
  c.multiple = 16;
  return c;
}

TEST(PrefillPacerTest, OffMeansNoCap) {
  PrefillPacer p(Config(0));
  EXPECT_EQ(p.tokens(), 0);
  p.Observe(2048, 0, 10240);
  p.Observe(0, 4, 100);
  EXPECT_EQ(p.tokens(), 0);
}

TEST(PrefillPacerTest, InitialCapBeforeAnyPrefillStep) {
  PrefillPacer p(Config(1000));
  EXPECT_EQ(p.tokens(), 256);
  p.Observe(0, 8, 100);  // decodes alone say nothing about prefill
  EXPECT_EQ(p.tokens(), 256);
  p.Observe(15, 0, 100);  // too few tokens to count
  EXPECT_EQ(p.tokens(), 256);
}

TEST(PrefillPacerTest, CapFillsTheTargetAfterTheDecodes) {
  PrefillPacer p(Config(1000));
  p.Observe(2048, 0, 10240);  // 5 ms per prefill token
  EXPECT_DOUBLE_EQ(p.ms_per_token(), 5.0);
  EXPECT_EQ(p.tokens(), 192);  // 1000 / 5 = 200, down to a multiple of 16
  p.Observe(0, 4, 100);        // a decode-only step: 100 ms
  EXPECT_EQ(p.tokens(), 176);  // (1000 − 100) / 5 = 180 → 176
  // A mixed step at the same rates leaves the estimate where it is: its decodes' share is
  // taken out before dividing by the prefill tokens.
  p.Observe(176, 4, 100 + 176 * 5.0);
  EXPECT_DOUBLE_EQ(p.ms_per_token(), 5.0);
  EXPECT_EQ(p.tokens(), 176);
}

TEST(PrefillPacerTest, FollowsAChangeOfRate) {
  PrefillPacer p(Config(1000));
  p.Observe(2048, 0, 2048 * 5.0);
  for (int i = 0; i < 40; ++i) p.Observe(256, 0, 256 * 10.0);  // the machine got slower
  EXPECT_NEAR(p.ms_per_token(), 10.0, 1e-3);
  EXPECT_EQ(p.tokens(), 96);  // 100 → 96
}

TEST(PrefillPacerTest, CapStaysWithinMinAndMax) {
  PrefillPacer slow(Config(1000));
  slow.Observe(100, 0, 100 * 100.0);  // 100 ms per token: 10 tokens would fit
  EXPECT_EQ(slow.tokens(), 64);
  PrefillPacer fast(Config(1000));
  fast.Observe(2048, 0, 20.0);  // 0.01 ms per token
  EXPECT_EQ(fast.tokens(), 2048);
  PrefillPacer busy(Config(1000));
  busy.Observe(2048, 0, 2048.0);
  busy.Observe(0, 64, 1500);  // the decodes alone take longer than the target
  EXPECT_EQ(busy.tokens(), 64);
}

TEST(PrefillPacerTest, MinAboveBudgetIsTheBudget) {
  PrefillPacerConfig c = Config(1000);
  c.max_tokens = 32;
  PrefillPacer p(c);
  EXPECT_EQ(p.tokens(), 32);
  p.Observe(32, 0, 32 * 100.0);
  EXPECT_EQ(p.tokens(), 32);
}

TEST(PrefillPacerTest, DecodeShareNeverTakesMoreThanHalfAStep) {
  PrefillPacer p(Config(1000));
  p.Observe(0, 64, 800);   // a large batch's decode step
  p.Observe(100, 2, 400);  // then a small batch with a prompt: 800 would exceed the step
  EXPECT_DOUBLE_EQ(p.ms_per_token(), 2.0);  // half of 400 ms over 100 tokens
}

TEST(PrefillPacerTest, IgnoresTimesThatAreNotTimes) {
  PrefillPacer p(Config(1000));
  p.Observe(2048, 0, 10240);
  p.Observe(2048, 0, std::numeric_limits<double>::quiet_NaN());
  p.Observe(2048, 0, -1);
  p.Observe(2048, 0, std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(p.ms_per_token(), 5.0);
}

}  // namespace
}  // namespace strata::scheduler
