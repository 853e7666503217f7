#include "engine/tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace strata::engine {
namespace {

const std::string kReplacementUtf8 = "\xEF\xBF\xBD";

TEST(Utf8Test, DecodesWellFormedCharactersOfEveryLength) {
  Utf8Step a = DecodeUtf8Step("a");
  EXPECT_EQ(a.status, Utf8Status::kChar);
  EXPECT_EQ(a.length, 1u);
  Utf8Step e = DecodeUtf8Step("\xC3\xA9");  // é
  EXPECT_EQ(e.code_point, 0xE9u);
  EXPECT_EQ(e.length, 2u);
  Utf8Step han = DecodeUtf8Step("\xE4\xBD\xA0");  // 你
  EXPECT_EQ(han.code_point, 0x4F60u);
  Utf8Step emoji = DecodeUtf8Step("\xF0\x9F\x98\x80");  // 😀
  EXPECT_EQ(emoji.code_point, 0x1F600u);
  EXPECT_EQ(emoji.length, 4u);
}

TEST(Utf8Test, TruncatedSequenceIsIncompleteNotInvalid) {
  Utf8Step step = DecodeUtf8Step("\xF0\x9F\x98");
  EXPECT_EQ(step.status, Utf8Status::kIncomplete);
  EXPECT_EQ(step.length, 3u);
}

TEST(Utf8Test, SanitizeReplacesMaximalSubpartsLikePython) {
  // Expected strings are Python's bytes.decode('utf-8', 'replace').
  EXPECT_EQ(SanitizeUtf8("a\xFF"
                         "b"),
            "a" + kReplacementUtf8 + "b");
  EXPECT_EQ(SanitizeUtf8("\xE0\x80\x80"),
            kReplacementUtf8 + kReplacementUtf8 + kReplacementUtf8);  // overlong
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"),
            kReplacementUtf8 + kReplacementUtf8 + kReplacementUtf8);  // surrogate
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98"), kReplacementUtf8);          // cut-off emoji
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98"
                         "a"),
            kReplacementUtf8 + "a");
  EXPECT_EQ(SanitizeUtf8("\xC3"), kReplacementUtf8);
  EXPECT_EQ(
      SanitizeUtf8("\xF4\x90\x80\x80"),
      kReplacementUtf8 + kReplacementUtf8 + kReplacementUtf8 + kReplacementUtf8);  // > U+10FFFF
  EXPECT_EQ(SanitizeUtf8("ok \xE4\xBD\xA0"), "ok \xE4\xBD\xA0");
}

TEST(Utf8Test, ValidityCheckCoversAsciiFastPathAndTails) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii text longer than eight bytes"));
  EXPECT_TRUE(IsValidUtf8("abcdefgh\xE4\xBD\xA0xyz"));
  EXPECT_FALSE(IsValidUtf8("abcdefghijklmnop\x80"));
  EXPECT_FALSE(IsValidUtf8("abc\xC0\xAF"));
}

TEST(Utf8Test, AppendEncodesAndCountMatches) {
  std::string s;
  for (char32_t cp : {U'a', U'\u00E9', U'\u4F60', U'\U0001F600'}) AppendUtf8(cp, &s);
  EXPECT_EQ(s, "a\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80");
  EXPECT_EQ(CountCodePoints(s), 4u);
}

TEST(Utf8Test, AppendWritesASurrogateAsItsThreeBytePattern) {
  std::string s;
  AppendUtf8(0xD800, &s);
  AppendUtf8(0xDFFF, &s);
  EXPECT_EQ(s, "\xED\xA0\x80\xED\xBF\xBF");
  EXPECT_FALSE(IsValidUtf8(s));
}

TEST(Utf8Test, PythonSpaceIncludesFileSeparatorsButNotMongolianVowelSeparator) {
  EXPECT_TRUE(IsPythonSpace(U' '));
  EXPECT_TRUE(IsPythonSpace(0x1C));
  EXPECT_TRUE(IsPythonSpace(0x85));
  EXPECT_TRUE(IsPythonSpace(0x3000));
  EXPECT_FALSE(IsPythonSpace(0x180E));
  EXPECT_FALSE(IsPythonSpace(0xFEFF));
  EXPECT_FALSE(IsPythonSpace(U'x'));
}

}  // namespace
}  // namespace strata::engine
