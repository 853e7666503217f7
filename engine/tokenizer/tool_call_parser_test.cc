#include "engine/tokenizer/tool_call_parser.h"

#include <gtest/gtest.h>

#include <random>

namespace strata::engine {
namespace {

const std::string kTwoCalls =
    "Let me check.<|tool_calls_section_begin|>"
    "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
    "{\"city\": \"Paris\"}<|tool_call_end|>\n"
    "<|tool_call_begin|> functions.search:1 <|tool_call_argument_begin|>\n"
    "  {\"query\": \"東京  tower\"}\n<|tool_call_end|>"
    "<|tool_calls_section_end|>";

TEST(KimiToolCallParserTest, ParsesSectionIntoOpenAiToolCalls) {
  ParsedToolCalls p = ParseKimiToolCalls(kTwoCalls);
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].id, "functions.get_weather:0");
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(p.tool_calls[1].id, "functions.search:1");
  EXPECT_EQ(p.tool_calls[1].name, "search");
  EXPECT_EQ(p.tool_calls[1].arguments, "{\"query\": \"東京  tower\"}");
}

TEST(KimiToolCallParserTest, PlainTextAndEdgeCases) {
  EXPECT_EQ(ParseKimiToolCalls("just text <|tool_call_end|>").content,
            "just text <|tool_call_end|>");
  EXPECT_TRUE(ParseKimiToolCalls("just text").tool_calls.empty());
  // Singular section marker variant; name without a "functions." prefix; unfinished call.
  ParsedToolCalls p = ParseKimiToolCalls(
      "<|tool_call_section_begin|><|tool_call_begin|>lookup:3<|tool_call_argument_begin|>{}"
      "<|tool_call_end|><|tool_call_begin|>functions.cut:4<|tool_call_argument_begin|>{\"a\"");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "lookup");
  EXPECT_EQ(p.tool_calls[0].arguments, "{}");
}

ParsedToolCalls StreamAll(const std::vector<std::string>& chunks) {
  KimiToolCallStreamParser parser;
  ParsedToolCalls out;
  auto apply = [&](const ToolCallStreamDelta& d) {
    out.content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (t.id.has_value()) {
        EXPECT_EQ(static_cast<size_t>(t.index), out.tool_calls.size());
        out.tool_calls.push_back({*t.id, *t.name, t.arguments});
      } else {
        EXPECT_EQ(static_cast<size_t>(t.index) + 1, out.tool_calls.size());
        out.tool_calls.back().arguments += t.arguments;
      }
    }
  };
  for (const std::string& c : chunks) apply(parser.Add(c));
  apply(parser.Finish());
  return out;
}

TEST(KimiToolCallStreamParserTest, HoldsBackPartialMarkersAndReleasesContentEarly) {
  KimiToolCallStreamParser parser;
  EXPECT_EQ(parser.Add("Hello <|tool_ca").content, "Hello ");
  EXPECT_FALSE(parser.saw_tool_calls());
  EXPECT_EQ(parser.Add("lls_section_begin|>").content, "");
  EXPECT_TRUE(parser.saw_tool_calls());
  ToolCallStreamDelta header =
      parser.Add("<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"x\": ");
  ASSERT_EQ(header.tool_calls.size(), 2u);
  EXPECT_EQ(header.tool_calls[0].id, "functions.f:0");
  EXPECT_EQ(header.tool_calls[0].name, "f");
  EXPECT_EQ(header.tool_calls[1].arguments, "{\"x\":");  // the trailing space is held
  ToolCallStreamDelta more = parser.Add("1}<|tool_call_end|><|tool_calls_section_end|>");
  ASSERT_EQ(more.tool_calls.size(), 1u);
  EXPECT_EQ(more.tool_calls[0].arguments, " 1}");
  EXPECT_EQ(parser.Finish().content, "");
}

TEST(KimiToolCallStreamParserTest, AnySplitEqualsNonStreaming) {
  const std::vector<std::string> texts = {
      kTwoCalls, "no tools at all, just <|tool words| and text",
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>"
      "\u3000 {\"k\": \"v\u3000 w\"} \u3000<|tool_call_end|><|tool_calls_section_end|>ignored"};
  std::mt19937 rng(11);
  for (const std::string& text : texts) {
    const ParsedToolCalls expected = ParseKimiToolCalls(text);
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<std::string> chunks;
      for (size_t pos = 0; pos < text.size();) {
        const size_t len = std::uniform_int_distribution<size_t>(1, 12)(rng);
        chunks.push_back(text.substr(pos, len));
        pos += len;
      }
      const ParsedToolCalls got = StreamAll(chunks);
      ASSERT_EQ(got.content, expected.content) << text;
      ASSERT_EQ(got.tool_calls.size(), expected.tool_calls.size()) << text;
      for (size_t i = 0; i < got.tool_calls.size(); ++i) {
        ASSERT_EQ(got.tool_calls[i].id, expected.tool_calls[i].id);
        ASSERT_EQ(got.tool_calls[i].name, expected.tool_calls[i].name);
        ASSERT_EQ(got.tool_calls[i].arguments, expected.tool_calls[i].arguments) << trial;
      }
    }
  }
}

}  // namespace
}  // namespace strata::engine
