// The /v1/completions logprobs object: tokens, offsets, and top_logprobs keyed by token text.
#include "server/frontend/response_render.h"

#include <gtest/gtest.h>

#include "server/frontend/testing/scripted_executor.h"

namespace strata::frontend {
namespace {

// Byte tokens 0x80..0xBF are continuation bytes: alone, each shows as U+FFFD.
constexpr int32_t kByte80 = 0x80, kByte81 = 0x81;

TEST(CompletionLogprobsJsonTest, TokensOfOneTextKeepTheBestLogprobUnderTheirKey) {
  std::unique_ptr<engine::Tokenizer> tokenizer = testing::MakeTestTokenizer();
  TokenLogprobEntry greedy{kByte80, -0.25f, {{kByte80, -0.25f}, {'a', -1.0f}, {kByte81, -2.0f}}};
  // Worse first: the key still ends with the best.
  TokenLogprobEntry unsorted{'b', -0.5f, {{kByte81, -3.0f}, {'b', -0.5f}, {kByte80, -1.5f}}};
  const Json out = CompletionLogprobsJson(*tokenizer, {greedy, unsorted}, 7);
  const std::string replacement = "\xEF\xBF\xBD";
  ASSERT_EQ(out["tokens"], Json::array({replacement, "b"}));
  EXPECT_EQ(out["text_offset"], Json::array({7, 10}));
  const Json& first = out["top_logprobs"][0];
  ASSERT_EQ(first.size(), 2u) << first.dump();
  EXPECT_DOUBLE_EQ(first[replacement].get<double>(), -0.25);
  EXPECT_DOUBLE_EQ(first["a"].get<double>(), -1.0);
  EXPECT_DOUBLE_EQ(out["token_logprobs"][0].get<double>(), -0.25);
  const Json& second = out["top_logprobs"][1];
  ASSERT_EQ(second.size(), 2u) << second.dump();
  EXPECT_DOUBLE_EQ(second[replacement].get<double>(), -1.5);
  EXPECT_DOUBLE_EQ(second["b"].get<double>(), -0.5);
}

TEST(CompletionLogprobsJsonTest, AnUnscoredEntryHasNullLogprobAndTop) {
  std::unique_ptr<engine::Tokenizer> tokenizer = testing::MakeTestTokenizer();
  TokenLogprobEntry echoed{'h', 0.0f, {}, /*scored=*/false};
  const Json out = CompletionLogprobsJson(*tokenizer, {echoed}, 0);
  EXPECT_TRUE(out["token_logprobs"][0].is_null());
  EXPECT_TRUE(out["top_logprobs"][0].is_null());
  EXPECT_EQ(out["tokens"][0], "h");
}

}  // namespace
}  // namespace strata::frontend
