// Every case is checked whole, streamed 1 and 7 characters at a time, at every split into two
// pieces (and three for short texts) and over random chunkings. Expected values are written by
// hand from the anchors' rules (docs/k3-format.md "Output").
#include "engine/tokenizer/xtml_output_parser.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace strata::engine {
namespace {

const std::string O = "<|open|>";
const std::string C = "<|close|>";
const std::string S = "<|sep|>";
const std::string kEndThink = C + "think" + S;
const std::string kOpenResponse = O + "response" + S;
const std::string kEndResponse = C + "response" + S;
const std::string kEndMessage = C + "message" + S;
const std::string kOpenTools = O + "tools" + S;
const std::string kEndTools = C + "tools" + S;

std::string Arg(const std::string& key, const std::string& type, const std::string& value) {
  return O + "argument key=\"" + key + "\" type=\"" + type + "\"" + S + value + C + "argument" + S;
}
std::string Call(const std::string& tool, int index, const std::string& args) {
  return O + "call tool=\"" + tool + "\" index=\"" + std::to_string(index) + "\"" + S + args + C +
         "call" + S;
}

struct Expected {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;  // ids "call-1", "call-2", … in order
};

XtmlOutputOptions Options(bool thinking, bool tools) {
  auto counter = std::make_shared<int>(0);
  return {.thinking = thinking, .tools = tools, .new_call_id = [counter] {
            return "call-" + std::to_string(++*counter);
          }};
}

XtmlOutput Streamed(const std::string& text, const std::vector<size_t>& cuts, bool thinking,
                    bool tools) {
  XtmlOutputStreamParser parser(Options(thinking, tools));
  XtmlOutput all;
  auto take = [&all](XtmlOutput&& d) {
    all.reasoning += d.reasoning;
    all.content += d.content;
    for (ToolCall& c : d.tool_calls) all.tool_calls.push_back(std::move(c));
  };
  size_t from = 0;
  for (size_t cut : cuts) {
    take(parser.Add(std::string_view(text).substr(from, cut - from)));
    from = cut;
  }
  take(parser.Add(std::string_view(text).substr(from)));
  take(parser.Finish());
  return all;
}

::testing::AssertionResult Same(const XtmlOutput& got, const Expected& want) {
  if (got.reasoning != want.reasoning) {
    return ::testing::AssertionFailure()
           << "reasoning '" << got.reasoning << "' want '" << want.reasoning << "'";
  }
  if (got.content != want.content) {
    return ::testing::AssertionFailure()
           << "content '" << got.content << "' want '" << want.content << "'";
  }
  if (got.tool_calls.size() != want.calls.size()) {
    return ::testing::AssertionFailure()
           << got.tool_calls.size() << " calls, want " << want.calls.size();
  }
  for (size_t i = 0; i < want.calls.size(); ++i) {
    const ToolCall& g = got.tool_calls[i];
    const ToolCall& w = want.calls[i];
    if (g.id != w.id || g.name != w.name || g.arguments != w.arguments) {
      return ::testing::AssertionFailure()
             << "call " << i << ": {" << g.id << ", " << g.name << ", " << g.arguments << "} want {"
             << w.id << ", " << w.name << ", " << w.arguments << "}";
    }
  }
  return ::testing::AssertionSuccess();
}

// Whole, 1- and 7-character chunks, every 2-way split, every 3-way split of short texts, and
// random chunkings.
void Check(const std::string& text, bool thinking, bool tools, const Expected& want) {
  SCOPED_TRACE(text);
  EXPECT_TRUE(Same(ParseXtmlOutput(text, Options(thinking, tools)), want)) << "whole";
  for (size_t step : {size_t{1}, size_t{7}}) {
    std::vector<size_t> cuts;
    for (size_t c = step; c < text.size(); c += step) cuts.push_back(c);
    EXPECT_TRUE(Same(Streamed(text, cuts, thinking, tools), want)) << step << "-char chunks";
  }
  for (size_t a = 0; a <= text.size(); ++a) {
    ASSERT_TRUE(Same(Streamed(text, {a}, thinking, tools), want)) << "split at " << a;
  }
  if (text.size() <= 120) {
    for (size_t a = 1; a < text.size(); ++a) {
      for (size_t b = a + 1; b < text.size(); ++b) {
        ASSERT_TRUE(Same(Streamed(text, {a, b}, thinking, tools), want))
            << "split at " << a << ", " << b;
      }
    }
  }
  std::mt19937 rng(static_cast<uint32_t>(text.size()));
  for (int round = 0; round < 50; ++round) {
    std::vector<size_t> cuts;
    std::uniform_int_distribution<size_t> len(1, 12);
    for (size_t c = len(rng); c < text.size(); c += len(rng)) cuts.push_back(c);
    ASSERT_TRUE(Same(Streamed(text, cuts, thinking, tools), want)) << "random round " << round;
  }
}

TEST(XtmlOutputParser, ReasoningOnlyWhenTheThinkChannelNeverClosed) {
  Check("Let me think about it.", true, true, {"Let me think about it.", "", {}});
  Check("", true, true, {"", "", {}});
}

TEST(XtmlOutputParser, ReasoningAndContent) {
  Check("Think." + kEndThink + kOpenResponse + "Hello!" + kEndResponse + kEndMessage, true, true,
        {"Think.", "Hello!", {}});
  // An <|open|>think<|sep|> that starts the output is not reasoning.
  Check(O + "think" + S + "R" + kEndThink + "C", true, false, {"R", "C", {}});
  // Empty reasoning, empty response.
  Check(kEndThink + kOpenResponse + kEndResponse + kEndMessage, true, true, {"", "", {}});
}

TEST(XtmlOutputParser, ContentOnlyWithThinkingOff) {
  Check("Hello world" + kEndResponse + kEndMessage, false, false, {"", "Hello world", {}});
  Check("  spaced  \n", false, true, {"", "  spaced  \n", {}});
  // An explicit response channel: the body ends at its close.
  Check(kOpenResponse + "A" + kEndResponse + "B", false, false, {"", "A", {}});
  // Without the open, closes are removed and the text kept (as the anchors' one-shot parse).
  Check("plain" + kEndResponse + "more" + kEndMessage, false, false, {"", "plainmore", {}});
  // Thinking off: a think channel is just text.
  Check(kEndThink + "x", false, false, {"", kEndThink + "x", {}});
}

TEST(XtmlOutputParser, SingleCall) {
  Check("Need weather." + kEndThink + kOpenResponse + kEndResponse + kOpenTools +
            Call("get_weather", 1, Arg("city", "string", "Paris")) + kEndTools + kEndMessage,
        true, true, {"Need weather.", "", {{"call-1", "get_weather", R"({"city": "Paris"})"}}});
}

TEST(XtmlOutputParser, ParallelCalls) {
  Check(
      "Checking both." + kEndResponse + kOpenTools +
          Call("get_weather", 1, Arg("city", "string", "Paris")) +
          Call("get_time", 2, Arg("tz", "string", "Europe/Paris") + Arg("offset", "number", "2")) +
          kEndTools + kEndMessage,
      false, true,
      {"",
       "Checking both.",
       {{"call-1", "get_weather", R"({"city": "Paris"})"},
        {"call-2", "get_time", R"({"tz": "Europe/Paris", "offset": 2})"}}});
}

TEST(XtmlOutputParser, TypedAndNestedArguments) {
  const std::string args =
      Arg("n", "number", "3.50") + Arg("i", "number", "42") + Arg("big", "number", "1e16") +
      Arg("small", "number", "0.00001") + Arg("flag", "boolean", "true") +
      Arg("none", "null", "null") + Arg("obj", "object", R"({"a":1,"b":[true,null,"x"]})") +
      Arg("arr", "array", R"([1, 2.0,{"k":"v"}])") +
      Arg("quote", "string", "say \"hi\"\nthen \\ leave") + Arg("raw", "string", " 42 ");
  Check(kEndResponse + kOpenTools + Call("f", 1, args) + kEndTools, false, true,
        {"",
         "",
         {{"call-1", "f",
           R"({"n": 3.5, "i": 42, "big": 1e+16, "small": 1e-05, "flag": true, "none": null, )"
           R"("obj": {"a": 1, "b": [true, null, "x"]}, "arr": [1, 2.0, {"k": "v"}], )"
           R"("quote": "say \"hi\"\nthen \\ leave", "raw": " 42 "})"}}});
}

TEST(XtmlOutputParser, Unicode) {
  Check("思考中…" + kEndThink + kOpenResponse + "Grüße 🎉" + kEndResponse + kOpenTools +
            Call("lookup", 1,
                 Arg("city", "string", "Zürich 東京") +
                     Arg("meta", "object", R"({"名前":"é\u00e9"})")) +
            kEndTools,
        true, true,
        {"思考中…",
         "Grüße 🎉",
         {{"call-1", "lookup", R"({"city": "Zürich 東京", "meta": {"名前": "éé"}})"}}});
}

TEST(XtmlOutputParser, EscapedAttributes) {
  Check(kEndResponse + kOpenTools +
            Call("a&amp;b&quot;c", 1,
                 Arg("k&amp;q", "string", "v") + Arg("x&amp;quot;", "string", "w")) +
            kEndTools,
        false, true, {"", "", {{"call-1", "a&b\"c", R"({"k&q": "v", "x&quot;": "w"})"}}});
  // `<` in attribute values, attributes in any order, no type (a string).
  Check(kEndResponse + kOpenTools + O + "call index=\"1\" tool=\"calc<beta\"" + S + O +
            "argument key=\"foo<bar\"" + S + "raw" + C + "argument" + S + C + "call" + S +
            kEndTools,
        false, true, {"", "", {{"call-1", "calc<beta", R"({"foo<bar": "raw"})"}}});
}

TEST(XtmlOutputParser, TextAroundCalls) {
  // Text after the tools channel is dropped.
  Check("Checking." + kEndResponse + kOpenTools + Call("f", 1, "") + kEndTools + "trailing" +
            kEndMessage,
        false, true, {"", "Checking.", {{"call-1", "f", "{}"}}});
  // Explicit response channel: text between its close and the tools channel is dropped.
  Check(kOpenResponse + "a" + kEndResponse + "junk" + kOpenTools + Call("f", 1, "") + kEndTools,
        false, true, {"", "a", {{"call-1", "f", "{}"}}});
  // Text between calls inside the channel is not content.
  Check("x" + kEndResponse + kOpenTools + "\n" + Call("f", 1, "") + " noise " + Call("g", 2, "") +
            kEndTools,
        false, true, {"", "x", {{"call-1", "f", "{}"}, {"call-2", "g", "{}"}}});
}

TEST(XtmlOutputParser, CallsInsideReasoningStayReasoning) {
  const std::string inner = kOpenTools + Call("x", 1, Arg("a", "number", "1")) + kEndTools;
  Check("I could call " + inner + " but no." + kEndThink + kOpenResponse + "Done." + kEndResponse,
        true, true, {"I could call " + inner + " but no.", "Done.", {}});
}

TEST(XtmlOutputParser, TruncatedOutput) {
  // A call cut off inside its argument: dropped, nothing shown.
  Check("Hi" + kEndResponse + kOpenTools + O + "call tool=\"f\" index=\"1\"" + S + O +
            "argument key=\"a\" type=\"string\"" + S + "par",
        false, true, {"", "Hi", {}});
  // The tools channel never closed: complete calls count, the cut one does not.
  Check(kEndResponse + kOpenTools + Call("f", 1, Arg("a", "number", "1")) + O + "call tool=\"g\"",
        false, true, {"", "", {{"call-1", "f", R"({"a": 1})"}}});
  // Cut markers at the end are dropped; text that only looks like one is kept.
  Check("Hello" + C + "resp", false, true, {"", "Hello", {}});
  Check("Hello" + C, false, true, {"", "Hello", {}});
  Check("Hi" + kEndResponse + O, false, true, {"", "Hi", {}});
  Check("Hello<|clo", false, true, {"", "Hello<|clo", {}});
  Check("a <", false, true, {"", "a <", {}});
  Check("Thinking" + C + "think", true, true, {"Thinking", "", {}});
  Check(O + "thi", true, true, {"", "", {}});
  // A marker's start that turns out to be text is released.
  Check("R" + C + "thinking more", true, true, {"R" + C + "thinking more", "", {}});
}

TEST(XtmlOutputParser, MalformedCalls) {
  // No tool attribute, an empty one, no whitespace after `call`: dropped; the next call counts.
  Check(kEndResponse + kOpenTools + O + "call index=\"1\"" + S + Arg("a", "string", "x") + C +
            "call" + S + Call("", 2, "") + O + "call" + S + C + "call" + S + Call("ok", 3, "") +
            kEndTools,
        false, true, {"", "", {{"call-1", "ok", "{}"}}});
  // Bad JSON falls back to the raw string; a repeated key keeps its first place, last value.
  Check(kEndResponse + kOpenTools +
            Call("f", 1,
                 Arg("a", "number", "1") + Arg("obj", "object", "{bad") +
                     Arg("n", "number", "12abc") + Arg("a", "number", "2")) +
            kEndTools,
        false, true, {"", "", {{"call-1", "f", R"({"a": 2, "obj": "{bad", "n": "12abc"})"}}});
  // A tools close inside a call ends the channel: the call is incomplete.
  Check(kEndResponse + kOpenTools + O + "call tool=\"f\"" + S + kEndTools + C + "call" + S, false,
        true, {"", "", {}});
  // Control characters inside a JSON string: not JSON, so the raw text.
  Check(
      kEndResponse + kOpenTools + Call("f", 1, Arg("o", "object", "{\"a\":\"x\ty\"}")) + kEndTools,
      false, true, {"", "", {{"call-1", "f", R"({"o": "{\"a\":\"x\ty\"}"})"}}});
}

TEST(XtmlOutputParser, ToolsOffDropsTheToolsChannel) {
  Check("Sure." + kEndResponse + kOpenTools + Call("f", 1, "") + kEndTools + kEndMessage, false,
        false, {"", "Sure.", {}});
  Check("R" + kEndThink + kOpenResponse + "answer" + kEndResponse + kOpenTools + Call("f", 1, "") +
            kEndTools,
        true, false, {"R", "answer", {}});
}

TEST(XtmlOutputParser, EndOfMessageEndsTheOutput) {
  Check("Hi" + kEndResponse + kEndMessage + "<|end_of_msg|>junk", false, true, {"", "Hi", {}});
  Check("R<|end_of_msg|>x" + kEndThink + "y", true, true, {"R", "", {}});
  Check(kEndResponse + kOpenTools + Call("f", 1, "") + "<|end_of_msg|>" + Call("g", 2, ""), false,
        true, {"", "", {{"call-1", "f", "{}"}}});
}

TEST(XtmlOutputParser, StreamingNeverLeaksMarkerPieces) {
  const std::string text = "Hi" + kEndResponse + kOpenTools +
                           Call("f", 1, Arg("a", "number", "1")) + kEndTools + kEndMessage;
  XtmlOutputStreamParser parser(Options(false, true));
  std::string content;
  int calls = 0;
  for (char c : text) {
    XtmlOutput d = parser.Add(std::string(1, c));
    EXPECT_EQ(d.content.find('<'), std::string::npos) << d.content;
    content += d.content;
    calls += static_cast<int>(d.tool_calls.size());
    if (!d.tool_calls.empty()) {  // a call arrives whole, with its id
      EXPECT_EQ(d.tool_calls[0].id, "call-1");
      EXPECT_EQ(d.tool_calls[0].arguments, R"({"a": 1})");
    }
  }
  EXPECT_TRUE(parser.Finish().empty());
  EXPECT_EQ(content, "Hi");
  EXPECT_EQ(calls, 1);
}

TEST(XtmlOutputParser, LongOutputsRandomChunkings) {
  std::string reasoning;
  for (int i = 0; i < 40; ++i) reasoning += "step " + std::to_string(i) + " <maybe> |x| ";
  std::string code;
  for (int i = 0; i < 60; ++i) code += "print(\"line " + std::to_string(i) + "\") # <|\n";
  Check(reasoning + kEndThink + kOpenResponse + "Running it." + kEndResponse + kOpenTools +
            Call("python", 1, Arg("code", "string", code) + Arg("timeout", "number", "30")) +
            kEndTools + kEndMessage,
        true, true, {reasoning, "Running it.", {{"call-1", "python", "{\"code\": \"" + [&] {
                                                   std::string escaped;
                                                   for (int i = 0; i < 60; ++i) {
                                                     escaped += "print(\\\"line " +
                                                                std::to_string(i) + "\\\") # <|\\n";
                                                   }
                                                   return escaped;
                                                 }() + "\", \"timeout\": 30}"}}});
}

TEST(XtmlOutputParser, RandomIdsAreDistinct) {
  const std::string a = RandomToolCallId();
  const std::string b = RandomToolCallId();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(a.size(), std::string("chatcmpl-tool-").size() + 32);
  const XtmlOutput out =
      ParseXtmlOutput(kEndResponse + kOpenTools + Call("f", 1, "") + Call("f", 2, ""),
                      {.thinking = false, .tools = true});
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_NE(out.tool_calls[0].id, out.tool_calls[1].id);
}

// Streaming equals the one-shot parse on random mixes of markers, tag names and text, the
// malformed ones included (the property, not hand-written values).
TEST(XtmlOutputParser, RandomMarkupStreamsAsItParsesWhole) {
  const std::vector<std::string> pieces = {"a",
                                           " ",
                                           "\n",
                                           "<",
                                           "<|",
                                           "|>",
                                           O,
                                           C,
                                           S,
                                           "think",
                                           "response",
                                           "tools",
                                           "call",
                                           "argument",
                                           "message",
                                           " tool=\"f\"",
                                           " key=\"k\"",
                                           " type=\"number\"",
                                           "12",
                                           "\"",
                                           "&amp;",
                                           "<|end_of_msg|>",
                                           kEndThink,
                                           kOpenResponse,
                                           kEndResponse,
                                           kOpenTools,
                                           kEndTools,
                                           Call("g", 1, Arg("x", "number", "1"))};
  std::mt19937 rng(46);
  for (int round = 0; round < 400; ++round) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(0, 40)(rng);
    for (int i = 0; i < n; ++i) {
      text += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    }
    for (bool thinking : {false, true}) {
      for (bool tools : {false, true}) {
        const XtmlOutput whole = ParseXtmlOutput(text, Options(thinking, tools));
        const Expected want{whole.reasoning, whole.content, whole.tool_calls};
        std::vector<size_t> ones;
        for (size_t c = 1; c < text.size(); ++c) ones.push_back(c);
        ASSERT_TRUE(Same(Streamed(text, ones, thinking, tools), want)) << text;
        std::vector<size_t> cuts;
        std::uniform_int_distribution<size_t> len(1, 9);
        for (size_t c = len(rng); c < text.size(); c += len(rng)) cuts.push_back(c);
        ASSERT_TRUE(Same(Streamed(text, cuts, thinking, tools), want)) << text;
      }
    }
  }
}

}  // namespace
}  // namespace strata::engine
