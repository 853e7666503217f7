// What the load generator times as a generation step (TTFT, ITL) in the chunks servers send.
#include "clients/bench_serve/stream_chunk.h"

#include <gtest/gtest.h>

namespace strata::bench_serve {
namespace {

bool Step(const std::string& data) { return ParseStreamChunk(data).step; }

TEST(StreamChunkTest, CompletionsTextIsAStepEvenWhenEmptyButAFinishOnlyChunkIsNot) {
  EXPECT_TRUE(Step(R"({"choices":[{"index":0,"text":"hi","finish_reason":null}]})"));
  // A token that shows no text yet (vLLM sends the chunk; its benchmark counts it).
  EXPECT_TRUE(Step(R"({"choices":[{"index":0,"text":"","finish_reason":null}]})"));
  EXPECT_TRUE(Step(R"({"choices":[{"index":0,"text":""}]})"));
  // The last token and the finish in one chunk (vLLM), or the finish alone (Strata, llama.cpp).
  EXPECT_TRUE(Step(R"({"choices":[{"index":0,"text":"end","finish_reason":"length"}]})"));
  EXPECT_FALSE(Step(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})"));
}

TEST(StreamChunkTest, ChatRoleAndFinishChunksAreNotStepsContentAndToolCallsAre) {
  EXPECT_FALSE(Step(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"));
  EXPECT_TRUE(Step(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]})"));
  EXPECT_TRUE(Step(R"({"choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]})"));
  EXPECT_TRUE(Step(R"({"choices":[{"index":0,"delta":{"reasoning_content":"so"}}]})"));
  EXPECT_TRUE(Step(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]})"));
  EXPECT_FALSE(Step(R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})"));
  EXPECT_FALSE(Step(R"({"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]})"));
}

TEST(StreamChunkTest, UsageChunkCarriesCountsAndIsNotAStep) {
  const StreamChunk c = ParseStreamChunk(
      R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}})");
  EXPECT_FALSE(c.step);
  EXPECT_EQ(c.prompt_tokens, 12);
  EXPECT_EQ(c.completion_tokens, 5);
  EXPECT_FALSE(c.error.has_value());
}

TEST(StreamChunkTest, ErrorsNameWhatCame) {
  EXPECT_EQ(ParseStreamChunk(R"({"error":{"message":"too long","type":"x"}})").error,
            "error event: too long");
  const StreamChunk bad = ParseStreamChunk("not json");
  ASSERT_TRUE(bad.error.has_value());
  EXPECT_NE(bad.error->find("not a JSON object: not json"), std::string::npos);
  EXPECT_EQ(ErrorMessage("plain body"), "plain body");
}

}  // namespace
}  // namespace strata::bench_serve
