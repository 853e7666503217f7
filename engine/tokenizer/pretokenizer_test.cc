#include "engine/tokenizer/pretokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/tokenizer/utf8.h"

namespace strata::engine {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(const PreTokenizer& pre, std::string_view text) {
  std::vector<std::string> pieces;
  pre.Split(text, [&](std::string_view p) { pieces.emplace_back(p); });
  return pieces;
}

std::unique_ptr<PreTokenizer> Make(std::string_view pattern) {
  auto pre = PreTokenizer::Create(pattern);
  EXPECT_TRUE(pre.ok()) << pre.status();
  return std::move(*pre);
}

TEST(PreTokenizerTest, Cl100kSplitsLikeTiktoken) {
  auto pre = Make(Cl100kPattern());
  EXPECT_THAT(Split(*pre, "Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Split(*pre, "I'm here"), ElementsAre("I", "'m", " here"));
  EXPECT_THAT(Split(*pre, "  hello"), ElementsAre(" ", " hello"));
  EXPECT_THAT(Split(*pre, "1234567"), ElementsAre("123", "456", "7"));
  EXPECT_THAT(Split(*pre, "a\n\nb"), ElementsAre("a", "\n\n", "b"));
  EXPECT_THAT(Split(*pre, "x  \n"), ElementsAre("x", "  \n"));
  EXPECT_THAT(Split(*pre, "hello!!! ..."), ElementsAre("hello", "!!!", " ..."));
}

TEST(PreTokenizerTest, O200kKeepsCaseRunsAndContractionsTogether) {
  auto pre = Make(O200kPattern());
  EXPECT_THAT(Split(*pre, "HelloWorld"), ElementsAre("Hello", "World"));
  EXPECT_THAT(Split(*pre, "don't STOP"), ElementsAre("don't", " STOP"));
  EXPECT_THAT(Split(*pre, "a+/\nb"), ElementsAre("a", "+/\n", "b"));
}

TEST(PreTokenizerTest, KimiSplitsHanRunsByScriptNotScriptExtensions) {
  auto pre = Make(KimiPatternOriginal());
  EXPECT_THAT(Split(*pre, "你好，世界hello"), ElementsAre("你好", "，", "世界", "hello"));
  // U+3001 "、" has Script=Common but Script_Extensions including Han: Rust's \p{Han} (Script)
  // leaves it out of the Han run.
  EXPECT_THAT(Split(*pre, "你好、世界"), ElementsAre("你好", "、", "世界"));
  EXPECT_THAT(Split(*pre, "Hello世界 THE end's"), ElementsAre("Hello", "世界", " THE", " end's"));
}

TEST(PreTokenizerTest, WhiteSpaceIsUnicodeWhiteSpaceNotPcreSpace) {
  auto pre = Make(Cl100kPattern());
  // U+180E is not White_Space (Rust, JavaScript) although PCRE2's \s matches it.
  EXPECT_THAT(Split(*pre, "a\u180Eb"), ElementsAre("a", "\u180Eb"));
  EXPECT_THAT(Split(*pre, "a\u3000b"), ElementsAre("a", "\u3000b"));
}

TEST(PreTokenizerTest, IllFormedUtf8BecomesItsOwnPiecesAndRoundTrips) {
  auto pre = Make(Cl100kPattern());
  EXPECT_THAT(Split(*pre,
                    "ab\xFF"
                    "cd"),
              ElementsAre("ab", "\xFF", "cd"));
  const std::string messy = "\xE4\xBD \xC3(x\x80\x80 y\xF0\x9F\x98";
  std::string joined;
  for (const auto& p : Split(*pre, messy)) {
    EXPECT_FALSE(p.empty());
    joined += p;
  }
  EXPECT_EQ(joined, messy);
}

TEST(PreTokenizerTest, TranslatesRustSyntax) {
  EXPECT_EQ(TranslateRustPattern(R"(\p{Han}+|\p{L}|\p{sc:Latin})"),
            R"(\p{sc:Han}+|\p{L}|\p{sc:Latin})");
  EXPECT_EQ(TranslateRustPattern(R"([\p{Lu}&&[^\p{Han}]])"), R"((?:(?![\p{sc:Han}])[\p{Lu}]))");
  EXPECT_EQ(TranslatePattern(KimiPatternOriginal()), std::string(KimiPattern()));
  auto bad = PreTokenizer::Create("(unclosed");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("offset"), std::string_view::npos);
}

// The hand-written Kimi classes (complements of general categories) must select exactly what
// the literal translation of Rust's class intersection selects, for every code point.
TEST(PreTokenizerTest, KimiFastPatternEqualsLiteralTranslationOnAllCodePoints) {
  auto fast = Make(KimiPattern());
  auto literal = Make(TranslateRustPattern(KimiPatternOriginal()));
  ASSERT_NE(fast->pattern(), literal->pattern());
  std::string text;
  size_t checked = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    // Contexts: after a lower-case letter, before an upper-case one, doubled, next to Han.
    text += "a";
    AppendUtf8(cp, &text);
    text += "B";
    AppendUtf8(cp, &text);
    AppendUtf8(cp, &text);
    text += "\xE4\xB8\xAD";  // 中
    AppendUtf8(cp, &text);
    text += "c'S ";
    if (text.size() > (1 << 20) || cp == 0x10FFFF) {
      ASSERT_EQ(Split(*fast, text), Split(*literal, text))
          << "block ending at U+" << std::hex << static_cast<uint32_t>(cp);
      text.clear();
    }
    ++checked;
  }
  EXPECT_EQ(checked, 0x110000u - 0x800u);
}

}  // namespace
}  // namespace strata::engine
