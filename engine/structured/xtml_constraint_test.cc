// Kimi K3 constrained replies: sampling from random logits under XtmlReplyConstraint always
// yields XTML that K3's output parser (xtml_output_parser.h) reads as forced tool calls of the
// declared tools with schema-valid arguments, or as schema-valid JSON content; with thinking on
// the reasoning before `C think S` is free.
#include "engine/structured/xtml_constraint.h"

#include <random>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/matcher_testing.h"
#include "engine/tokenizer/xtml_output_parser.h"

namespace strata::structured {
namespace {

// Ids 0–255: bytes; 256: the end id; 257–260: the XTML markers (control tokens: no bytes);
// then pieces of the markup and of values.
constexpr int32_t kXtmlEnd = 256;
constexpr XtmlMarkers kXtmlMarkers{257, 258, 259, 260};

std::shared_ptr<const TokenVocab> XtmlVocab() {
  std::vector<std::string> bytes(261);
  for (int b = 0; b < 256; ++b)
    bytes[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  for (const char* piece :
       {"response", "tools", "call",       " tool=\"", "get_weather", "\" index=\"", "argument",
        " key=\"",  "city",  "\" type=\"", "string",   "number",      "message",     "think",
        "th",       "ink",   "{\"",        "\": ",     "Paris",       "true",        "12",
        "\"",       "days",  "unit",       "celsius",  "search"}) {
    bytes.emplace_back(piece);
  }
  return std::make_shared<TokenVocab>(std::move(bytes));
}

XtmlTool Tool(const char* name, const JsonGrammar& parameters) {
  absl::StatusOr<XtmlTool> tool = XtmlToolFor(name, parameters);
  CHECK(tool.ok()) << tool.status();
  return *std::move(tool);
}

// Samples until the end id (the tokens of `forced` first, by a large logit, as a model that
// writes them would); the text with the markers spelled out, as the server detokenizes it.
std::string Sample(const std::shared_ptr<const XtmlReplyConstraint>& c, uint64_t seed,
                   const std::vector<int32_t>& forced = {}) {
  const TokenVocab& vocab = *c->vocab();
  engine::SamplingParams params;
  params.constraint = c;
  engine::Sampler sampler(params, seed, {});
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(vocab.size()));
  std::string text;
  bool ended = false;
  for (size_t step = 0; step < 100000; ++step) {
    for (float& x : logits) x = normal(rng);
    if (step < forced.size()) logits[static_cast<size_t>(forced[step])] = 100.0f;
    const int32_t id = sampler.Sample(logits.data(), vocab.size());
    if (step < forced.size()) {
      EXPECT_EQ(id, forced[step]) << "step " << step;
    }
    if (id == kXtmlEnd) {
      ended = true;
      break;
    }
    if (id == kXtmlMarkers.open) {
      text += "<|open|>";
    } else if (id == kXtmlMarkers.close) {
      text += "<|close|>";
    } else if (id == kXtmlMarkers.sep) {
      text += "<|sep|>";
    } else if (id == kXtmlMarkers.end_of_message) {
      text += "<|end_of_msg|>";
    } else {
      text += vocab.bytes(id);
    }
  }
  EXPECT_TRUE(ended) << text;
  return text;
}

// `text` as byte tokens (ids 0–255).
std::vector<int32_t> Bytes(std::string_view text) {
  std::vector<int32_t> ids;
  for (char ch : text) ids.push_back(static_cast<uint8_t>(ch));
  return ids;
}

constexpr char kWeather[] = R"({"type":"object","properties":{
    "city":{"type":"string"},
    "days":{"type":"integer","minimum":1,"maximum":14},
    "unit":{"enum":["celsius","fahrenheit"]},
    "detail":{"type":"object","properties":{"hourly":{"type":"boolean"}},"required":["hourly"]},
    "tags":{"type":"array","items":{"type":"string"},"maxItems":2},
    "note":{"anyOf":[{"type":"string","pattern":"^[a-z]{1,4}$"},{"type":"null"}]}},
  "required":["city","days"],"additionalProperties":false})";
constexpr char kSearch[] = R"({"type":"object","properties":{"q":{"type":"string"},
    "n":{"type":"number"}},"required":["q","n"],"additionalProperties":false})";

// The calls of `text` as K3's parser reads them; every one names a declared tool and its
// arguments fit that tool's schema.
void ExpectCalls(const std::string& text, bool thinking, size_t min_calls, size_t max_calls) {
  const engine::XtmlOutput out =
      engine::ParseXtmlOutput(text, {.thinking = thinking, .tools = true});
  ASSERT_GE(out.tool_calls.size(), min_calls) << text;
  ASSERT_LE(out.tool_calls.size(), max_calls) << text;
  EXPECT_EQ(out.content, "") << text;
  EXPECT_TRUE(
      text.ends_with("<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
                     "<|end_of_msg|>"))
      << text;
  for (const engine::ToolCall& call : out.tool_calls) {
    const bool weather = call.name == "get_weather";
    ASSERT_TRUE(weather || call.name == "search") << call.name;
    EXPECT_TRUE(
        testing::Accepts(*testing::CompiledSchema(weather ? kWeather : kSearch), call.arguments))
        << call.arguments << "\nfrom " << text;
  }
}

TEST(XtmlConstraintTest, RequiredCallsParseAsDeclaredToolsWithSchemaValidArguments) {
  auto vocab = XtmlVocab();
  XtmlReplyOptions o;
  o.markers = kXtmlMarkers;
  o.tools = {Tool("get_weather", *testing::CompiledSchema(kWeather)),
             Tool("search", *testing::CompiledSchema(kSearch))};
  o.max_calls = 3;
  o.end_ids = {kXtmlEnd};
  auto c = std::make_shared<const XtmlReplyConstraint>(o, vocab);
  size_t calls = 0;
  for (uint64_t seed = 1; seed <= 25; ++seed) {
    const std::string text = Sample(c, seed);
    ExpectCalls(text, /*thinking=*/false, 1, 3);
    calls += engine::ParseXtmlOutput(text, {.thinking = false, .tools = true}).tool_calls.size();
    // Thinking off: the prompt opened the response channel, which the reply closes empty.
    EXPECT_TRUE(text.starts_with("<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="))
        << text;
  }
  EXPECT_GT(calls, 25u);  // some replies made several calls
}

TEST(XtmlConstraintTest, NamedToolIsCalledOnceAfterFreeReasoning) {
  auto vocab = XtmlVocab();
  XtmlReplyOptions o;
  o.markers = kXtmlMarkers;
  o.thinking = true;
  o.tools = {Tool("get_weather", *testing::CompiledSchema(kWeather))};
  o.end_ids = {kXtmlEnd};
  auto c = std::make_shared<const XtmlReplyConstraint>(o, vocab);
  // Reasoning that holds a `C` not followed by "think", then closes the think channel.
  std::vector<int32_t> forced = Bytes("Hmm");
  for (int32_t id : {kXtmlMarkers.close, 262 /* "tools" */, kXtmlMarkers.sep, int32_t{'x'},
                     kXtmlMarkers.close, 275 /* "th" */, 276 /* "ink" */, kXtmlMarkers.sep}) {
    forced.push_back(id);
  }
  for (uint64_t seed = 1; seed <= 15; ++seed) {
    const std::string text = Sample(c, seed, forced);
    ExpectCalls(text, /*thinking=*/true, 1, 1);
    const engine::XtmlOutput out = engine::ParseXtmlOutput(text, {.thinking = true, .tools = true});
    EXPECT_EQ(out.reasoning, "Hmm<|close|>tools<|sep|>x");
    EXPECT_EQ(out.tool_calls[0].name, "get_weather");
    EXPECT_TRUE(
        text.starts_with("Hmm<|close|>tools<|sep|>x<|close|>think<|sep|><|open|>response"
                         "<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call "
                         "tool=\"get_weather\" index=\"1\"<|sep|>"))
        << text;
  }
}

TEST(XtmlConstraintTest, ReasoningCannotEndTheReply) {
  auto vocab = XtmlVocab();
  XtmlReplyOptions o;
  o.markers = kXtmlMarkers;
  o.thinking = true;
  o.tools = {Tool("search", *testing::CompiledSchema(kSearch))};
  o.end_ids = {kXtmlEnd};
  auto c = std::make_shared<const XtmlReplyConstraint>(o, vocab);
  std::unique_ptr<engine::TokenMatcher> m = c->NewMatcher();
  std::vector<float> logits(static_cast<size_t>(vocab->size()), 0.0f);
  m->MaskLogits(logits.data(), vocab->size());
  EXPECT_EQ(logits[kXtmlEnd], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(logits[static_cast<size_t>(kXtmlMarkers.end_of_message)],
            -std::numeric_limits<float>::infinity());
  EXPECT_EQ(logits['a'], 0.0f);
  EXPECT_EQ(logits[static_cast<size_t>(kXtmlMarkers.open)], 0.0f);
}

TEST(XtmlConstraintTest, ResponseFormatMakesTheResponseChannelSchemaValidJson) {
  auto vocab = XtmlVocab();
  const char* schema = R"({"type":"object","properties":{"city":{"type":"string","maxLength":6},
      "days":{"type":"integer"},"ok":{"type":"boolean"}},"required":["city","days"],
      "additionalProperties":false})";
  for (bool thinking : {false, true}) {
    XtmlReplyOptions o;
    o.markers = kXtmlMarkers;
    o.thinking = thinking;
    o.response = std::make_shared<JsonConstraint>(testing::CompiledSchema(schema), vocab,
                                                  std::vector<int32_t>{kXtmlMarkers.close});
    o.end_ids = {kXtmlEnd};
    auto c = std::make_shared<const XtmlReplyConstraint>(o, vocab);
    std::vector<int32_t> forced;
    if (thinking) forced = {int32_t{'o'}, int32_t{'k'}, kXtmlMarkers.close, 274, kXtmlMarkers.sep};
    for (uint64_t seed = 1; seed <= 15; ++seed) {
      const std::string text = Sample(c, seed, forced);
      const engine::XtmlOutput out =
          engine::ParseXtmlOutput(text, {.thinking = thinking, .tools = false});
      EXPECT_TRUE(testing::Accepts(*testing::CompiledSchema(schema), out.content)) << text;
      EXPECT_TRUE(Json::accept(out.content)) << text;
      EXPECT_EQ(out.reasoning, thinking ? "ok" : "") << text;
      EXPECT_TRUE(text.ends_with("<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"))
          << text;
    }
  }
}

TEST(XtmlConstraintTest, ArgumentFormsFollowTheSchema) {
  const XtmlTool tool = Tool("get_weather", *testing::CompiledSchema(kWeather));
  ASSERT_EQ(tool.arguments.size(), 6u);
  auto types = [&](size_t i) {
    std::vector<std::string> t;
    for (const XtmlArgumentForm& f : tool.arguments[i].forms) t.push_back(f.type);
    return t;
  };
  EXPECT_EQ(tool.arguments[0].key, "city");
  EXPECT_TRUE(tool.arguments[0].required);
  EXPECT_EQ(types(0), std::vector<std::string>{"string"});
  EXPECT_EQ(types(1), std::vector<std::string>{"number"});
  EXPECT_FALSE(tool.arguments[2].required);
  EXPECT_EQ(types(2), std::vector<std::string>{"string"});
  EXPECT_EQ(types(3), std::vector<std::string>{"object"});
  EXPECT_EQ(types(4), std::vector<std::string>{"array"});
  EXPECT_EQ(types(5), (std::vector<std::string>{"string", "null"}));
  // A string enum is one of its values, raw; a pattern string matches its pattern, raw.
  EXPECT_TRUE(testing::Accepts(*tool.arguments[2].forms[0].body, "celsius"));
  EXPECT_FALSE(testing::Accepts(*tool.arguments[2].forms[0].body, "\"celsius\""));
  EXPECT_TRUE(testing::Accepts(*tool.arguments[5].forms[0].body, "abc"));
  EXPECT_FALSE(testing::Accepts(*tool.arguments[5].forms[0].body, "abcde"));
  EXPECT_TRUE(testing::Accepts(*tool.arguments[1].forms[0].body, "14"));
  EXPECT_FALSE(testing::Accepts(*tool.arguments[1].forms[0].body, "15"));

  // Numbers are read back as doubles: exponents have at most 2 digits, so none overflows.
  const XtmlTool search = Tool("search", *testing::CompiledSchema(kSearch));
  EXPECT_TRUE(testing::Accepts(*search.arguments[1].forms[0].body, "-1.5e99"));
  EXPECT_FALSE(testing::Accepts(*search.arguments[1].forms[0].body, "1e308"));

  EXPECT_EQ(XtmlAttributeValue(R"(a"b&c)"), "a&quot;b&amp;c");
  absl::StatusOr<XtmlTool> not_object =
      XtmlToolFor("f", *testing::CompiledSchema(R"({"type":"array"})"));
  ASSERT_FALSE(not_object.ok());
  EXPECT_NE(not_object.status().message().find("object schema"), std::string::npos);
  // No parameters (any object): a call without arguments.
  const XtmlTool bare = Tool("now", AnyJsonObjectGrammar());
  EXPECT_TRUE(bare.arguments.empty());
}

TEST(XtmlConstraintTest, RawStringsKeepTheirLengthBoundsInCodePoints) {
  const XtmlTool tool = Tool("f", *testing::CompiledSchema(R"({"type":"object","properties":{
      "short":{"type":"string","minLength":2,"maxLength":4},
      "long":{"type":"string","minLength":3},
      "free":{"type":"string"}}})"));
  ASSERT_EQ(tool.arguments.size(), 3u);
  const JsonGrammar& bounded = *tool.arguments[0].forms[0].body;
  EXPECT_FALSE(testing::Accepts(bounded, "a"));
  EXPECT_TRUE(testing::Accepts(bounded, "ab"));
  EXPECT_TRUE(testing::Accepts(bounded, "日本語\n"));  // 4 code points, 10 bytes
  EXPECT_FALSE(testing::Accepts(bounded, "abcde"));
  const JsonGrammar& at_least = *tool.arguments[1].forms[0].body;
  EXPECT_FALSE(testing::Accepts(at_least, "ab"));
  EXPECT_TRUE(testing::Accepts(at_least, std::string(500, 'x')));
  EXPECT_TRUE(testing::Accepts(*tool.arguments[2].forms[0].body, ""));
}

}  // namespace
}  // namespace strata::structured
