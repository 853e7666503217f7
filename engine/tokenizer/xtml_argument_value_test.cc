// Expected texts are what Python's json.dumps(json.loads(body), ensure_ascii=False) prints,
// written by hand from Python's rules.
#include "engine/tokenizer/xtml_argument_value.h"

#include <string>

#include <gtest/gtest.h>

namespace strata::engine::xtml {
namespace {

TEST(PythonJsonString, EscapesAsJsonDumpsWithoutAsciiEscaping) {
  EXPECT_EQ(PythonJsonString("plain"), "\"plain\"");
  EXPECT_EQ(PythonJsonString("say \"hi\" \\ now"), R"("say \"hi\" \\ now")");
  EXPECT_EQ(PythonJsonString("a\nb\rc\td\be\ff"), R"("a\nb\rc\td\be\ff")");
  EXPECT_EQ(PythonJsonString(std::string("\x01\x1f", 2)), R"("\u0001\u001f")");
  EXPECT_EQ(PythonJsonString(std::string("nul\0!", 5)), R"("nul\u0000!")");
  EXPECT_EQ(PythonJsonString("\x7f/"), "\"\x7f/\"");  // DEL and '/' as they are
  EXPECT_EQ(PythonJsonString("Zürich 東京 🎉"), "\"Zürich 東京 🎉\"");
}

TEST(PythonJsonRoundTrip, ScalarsAsPythonWritesThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"42", "42"},
      {"-7", "-7"},
      {"-0", "0"},
      {"123456789012345678901234567890", "123456789012345678901234567890"},
      {"3.50", "3.5"},
      {"1.0", "1.0"},
      {"1E2", "100.0"},
      {"2.5e-3", "0.0025"},
      {"0.0001", "0.0001"},
      {"0.00001", "1e-05"},
      {"1.5e-7", "1.5e-07"},
      {"1e16", "1e+16"},
      {"9999999999999998.0", "9999999999999998.0"},
      {"123456789.123", "123456789.123"},
      {"1e22", "1e+22"},
      {"-0.0", "-0.0"},
      {"0.1", "0.1"},
      {"5e-324", "5e-324"},
      {"1.7976931348623157e308", "1.7976931348623157e+308"},
      {"1e400", "Infinity"},
      {"-1e400", "-Infinity"},
      {"1e-400", "0.0"},
      {"NaN", "NaN"},
      {"Infinity", "Infinity"},
      {"-Infinity", "-Infinity"},
      {"true", "true"},
      {"false", "false"},
      {"null", "null"},
      {R"("x\u00e9\/")", R"("xé/")"},
      {R"("\ud83d\ude00")", R"("😀")"},
      {R"("\ud800!")", R"("\ud800!")"},
  };
  for (const auto& [body, want] : cases) {
    EXPECT_EQ(PythonJsonRoundTrip(body).value_or("<error>"), want) << body;
  }
}

TEST(PythonJsonRoundTrip, ContainersUsePythonSeparatorsAndDictSemantics) {
  EXPECT_EQ(PythonJsonRoundTrip(R"({"a":1,"b":[true,null,"x"]})").value_or(""),
            R"({"a": 1, "b": [true, null, "x"]})");
  EXPECT_EQ(PythonJsonRoundTrip(" \n[ 1 , 2.0,{\"k\" :\"v\"} ]\t\r").value_or(""),
            R"([1, 2.0, {"k": "v"}])");
  EXPECT_EQ(PythonJsonRoundTrip("{}").value_or(""), "{}");
  EXPECT_EQ(PythonJsonRoundTrip("[ ]").value_or(""), "[]");
  // A repeated key keeps its first place and takes its last value, at every level.
  EXPECT_EQ(PythonJsonRoundTrip(R"({"a":1,"b":{"x":1,"y":2,"x":3},"a":[2]})").value_or(""),
            R"({"a": [2], "b": {"x": 3, "y": 2}})");
  EXPECT_EQ(PythonJsonRoundTrip(R"({"名前":"東京","q":"say \"hi\""})").value_or(""),
            R"({"名前": "東京", "q": "say \"hi\""})");
}

TEST(PythonJsonRoundTrip, RefusesWhatJsonLoadsRefuses) {
  const char* bad[] = {"",
                       "01",
                       "1.",
                       ".5",
                       "+1",
                       "[1,]",
                       "{'a':1}",
                       "tru",
                       "[1] x",
                       "{\"a\" 1}",
                       "\"open",
                       "nan",
                       "[1 2]",
                       "\"\\x\"",
                       "\"\\u12\"",
                       "{\"a\":}",
                       "\xef\xbb\xbf"
                       "1"};
  for (const char* body : bad) EXPECT_FALSE(PythonJsonRoundTrip(body).has_value()) << body;
  // strict: a control character inside a string.
  EXPECT_FALSE(PythonJsonRoundTrip("\"a\tb\"").has_value());
  EXPECT_FALSE(PythonJsonRoundTrip("\"a\nb\"").has_value());
}

TEST(PythonJsonRoundTrip, BoundsNesting) {
  const int deep = kMaxArgumentDepth + 10;
  EXPECT_FALSE(PythonJsonRoundTrip(std::string(deep, '[') + std::string(deep, ']')).has_value());
  const int ok = kMaxArgumentDepth - 10;
  EXPECT_EQ(PythonJsonRoundTrip(std::string(ok, '[') + std::string(ok, ']')).value_or(""),
            std::string(ok, '[') + std::string(ok, ']'));
}

TEST(ArgumentValueJson, StringTypeAndMissingTypeAreRawOtherTypesJsonWithFallback) {
  EXPECT_EQ(ArgumentValueJson(" 42 ", std::nullopt), "\" 42 \"");
  EXPECT_EQ(ArgumentValueJson("{\"a\": 1}", "string"), R"("{\"a\": 1}")");
  EXPECT_EQ(ArgumentValueJson(" 7 ", "number"), "7");
  EXPECT_EQ(ArgumentValueJson("12abc", "number"), "\"12abc\"");
  EXPECT_EQ(ArgumentValueJson("{bad", "object"), "\"{bad\"");
  EXPECT_EQ(ArgumentValueJson("\"quoted\"", "string"), R"("\"quoted\"")");
  EXPECT_EQ(ArgumentValueJson("\"quoted\"", "integer"), R"("quoted")");  // any non-string type
  EXPECT_EQ(ArgumentValueJson("true", ""), "true");
}

TEST(ArgumentsObjectJson, RepeatedKeyKeepsFirstPlaceLastValue) {
  EXPECT_EQ(ArgumentsObjectJson({}), "{}");
  EXPECT_EQ(ArgumentsObjectJson({{"a", "1"}, {"b", "\"x\""}, {"a", "2"}}), R"({"a": 2, "b": "x"})");
  EXPECT_EQ(ArgumentsObjectJson({{"k\"q", "null"}}), R"({"k\"q": null})");
}

}  // namespace
}  // namespace strata::engine::xtml
