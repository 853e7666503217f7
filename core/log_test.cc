#include "core/log.h"

#include <gtest/gtest.h>

namespace strata::log {
namespace {

TEST(LogTest, ParsesLevelsCaseInsensitively) {
  Level level = Level::kInfo;
  EXPECT_TRUE(ParseLevel("DEBUG", &level));
  EXPECT_EQ(level, Level::kDebug);
  EXPECT_TRUE(ParseLevel("off", &level));
  EXPECT_EQ(level, Level::kOff);
  EXPECT_FALSE(ParseLevel("verbose", &level));
  EXPECT_EQ(level, Level::kOff);
}

TEST(LogTest, DisabledLevelsDoNotEvaluateArguments) {
  SetLevel(Level::kWarn);
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  LOG_DEBUG("test", "value={}", count());
  EXPECT_EQ(evaluated, 0);
  LOG_WARN("test", "value={}", count());
  EXPECT_EQ(evaluated, 1);
  SetLevel(Level::kInfo);
}

TEST(LogTest, JsonLinesAreOneObjectPerLine) {
  testing::internal::CaptureStderr();
  SetJsonLines(true);
  LOG_INFO("sched", "step={} quote=\"", 3);
  SetJsonLines(false);
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("\"module\":\"sched\""), std::string::npos) << out;
  EXPECT_NE(out.find("step=3 quote=\\\""), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::log
