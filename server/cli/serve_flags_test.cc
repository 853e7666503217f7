// The parser flags of `strata serve` (vLLM's --tool-call-parser / --reasoning-parser).
#include "server/cli/serve_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata::cli {
namespace {

absl::StatusOr<ServeOptions> Options(const std::vector<std::string>& args) {
  absl::StatusOr<Flags> flags = Flags::Parse(args, ServeFlags());
  if (!flags.ok()) return flags.status();
  return ServeOptionsFromFlags(*flags);
}

TEST(ServeFlagsTest, ParserFlagsTakeKimiK2AndKimiK3) {
  for (const char* value : {"kimi_k2", "kimi_k3"}) {
    EXPECT_TRUE(Options({"--tool-call-parser", value}).ok()) << value;
    EXPECT_TRUE(Options({"--reasoning-parser", value}).ok()) << value;
  }
  for (const char* flag : {"--tool-call-parser", "--reasoning-parser"}) {
    absl::StatusOr<ServeOptions> refused = Options({flag, "hermes"});
    ASSERT_FALSE(refused.ok()) << flag;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("kimi_k2 or kimi_k3"));
    EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("got 'hermes'"));
  }
}

}  // namespace
}  // namespace strata::cli
