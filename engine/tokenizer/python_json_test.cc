#include "engine/tokenizer/python_json.h"

#include <gtest/gtest.h>

#include <limits>
#include <utility>

namespace strata::engine {
namespace {

using Json = nlohmann::ordered_json;

TEST(PythonJsonTest, FloatReprMatchesPython) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const std::pair<double, const char*> kReprs[] = {
      {1.0, "1.0"},
      {0.1, "0.1"},
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {0.0001, "0.0001"},
      {0.00001, "1e-05"},
      {-2.5e-7, "-2.5e-07"},
      {123456.789, "123456.789"},
      {1.5e300, "1.5e+300"},
      {5e-324, "5e-324"},
      {kInf, "inf"},
      {-kInf, "-inf"},
      {std::numeric_limits<double>::quiet_NaN(), "nan"},
  };
  for (const auto& [x, repr] : kReprs) EXPECT_EQ(PythonFloatRepr(x), repr) << x;
}

TEST(PythonJsonTest, JsonFloatSpellsNonFiniteValuesAsJsonDumps) {
  EXPECT_EQ(PythonJsonFloat(2.5), "2.5");
  EXPECT_EQ(PythonJsonFloat(1e-7), "1e-07");
  EXPECT_EQ(PythonJsonFloat(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(PythonJsonFloat(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(PythonJsonFloat(-std::numeric_limits<double>::infinity()), "-Infinity");
}

std::string Escaped(std::string_view s, bool ensure_ascii) {
  std::string out;
  for (const char c : s) AppendJsonStringByte(c, ensure_ascii, &out);
  return out;
}

TEST(PythonJsonTest, StringBytesEscapeAsJsonDumps) {
  EXPECT_EQ(Escaped("say \"hi\" \\ now/", false), R"(say \"hi\" \\ now/)");
  EXPECT_EQ(Escaped("a\nb\rc\td\be\ff", false), R"(a\nb\rc\td\be\ff)");
  EXPECT_EQ(Escaped(std::string("\x01\x1f\0", 3), false), R"(\u0001\u001f\u0000)");
  EXPECT_EQ(Escaped("\x7f", false), "\x7f");
  EXPECT_EQ(Escaped("\x7f", true), R"(\u007f)");
  EXPECT_EQ(Escaped("Zürich \xff", true), "Zürich \xff");  // bytes >= 0x80: the caller's
}

TEST(PythonJsonTest, SimpleEscapesAreTheOnesJsonAndPythonShare) {
  const std::pair<char, char> kShared[] = {{'"', '"'},  {'\\', '\\'}, {'b', '\b'}, {'f', '\f'},
                                           {'n', '\n'}, {'r', '\r'},  {'t', '\t'}};
  for (const auto& [letter, character] : kShared) {
    EXPECT_EQ(SimpleEscapeChar(letter), character) << letter;
  }
  for (const char letter : {'/', '\'', 'v', 'u', 'x', 'a', '\0'}) {
    EXPECT_EQ(SimpleEscapeChar(letter), std::nullopt) << letter;
  }
  // Writing and reading agree: every escape AppendJsonStringByte writes with one letter reads
  // back as its byte.
  for (int b = 0; b < 0x80; ++b) {
    std::string escaped;
    AppendJsonStringByte(static_cast<char>(b), /*ensure_ascii=*/true, &escaped);
    if (escaped.size() == 2) {
      EXPECT_EQ(SimpleEscapeChar(escaped[1]), static_cast<char>(b)) << b;
    }
  }
}

TEST(PythonJsonTest, HexDigits) {
  EXPECT_EQ(ParseHexDigits("00e9"), 0xE9u);
  EXPECT_EQ(ParseHexDigits("D83d"), 0xD83Du);
  EXPECT_EQ(ParseHexDigits("ffffffff"), 0xFFFFFFFFu);
  EXPECT_EQ(ParseHexDigits(""), std::nullopt);
  EXPECT_EQ(ParseHexDigits("12g4"), std::nullopt);
  EXPECT_EQ(ParseHexDigits("+1"), std::nullopt);
  EXPECT_EQ(ParseHexDigits("123456789"), std::nullopt);
}

TEST(PythonJsonTest, SortKeysDeepSortsEveryObjectByUtf8Bytes) {
  const Json v = Json::parse(R"({"b": [{"z": 1, "a": 2}], "a": {"é": 1, "e": 2, "Z": 3}})");
  EXPECT_EQ(SortKeysDeep(v).dump(), R"({"a":{"Z":3,"e":2,"é":1},"b":[{"a":2,"z":1}]})");
  EXPECT_EQ(SortKeysDeep(Json("text")), Json("text"));
}

}  // namespace
}  // namespace strata::engine
