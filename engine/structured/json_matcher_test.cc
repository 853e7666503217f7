// The byte-level matcher against nlohmann's JSON parser (an independent implementation): for
// the any-object grammar, a text is accepted exactly when nlohmann parses it as an object, over
// random documents and random one-byte mutations of them; every prefix of an accepted text is
// viable.
#include "engine/structured/json_matcher.h"

#include <optional>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "engine/structured/matcher_testing.h"

namespace strata::structured {
namespace {

using testing::Accepts;
using testing::ExpectVerdicts;
using testing::Feed;

// A random JSON value as text (ASCII, small whitespace runs, short numbers).
class JsonGen {
 public:
  explicit JsonGen(uint32_t seed) : rng_(seed) {}

  std::string Object(int depth) {
    std::string out = absl::StrCat("{", Ws());
    const int n = Pick(0, depth > 3 ? 1 : 4);
    for (int i = 0; i < n; ++i) {
      if (i > 0) absl::StrAppend(&out, ",", Ws());
      absl::StrAppend(&out, String(), Ws(), ":", Ws(), Value(depth + 1), Ws());
    }
    out += '}';
    return out;
  }

  std::string Value(int depth) {
    switch (Pick(0, depth > 4 ? 3 : 5)) {
      case 0:
        return String();
      case 1:
        return Number();
      case 2: {
        const char* lits[] = {"true", "false", "null"};
        return lits[Pick(0, 2)];
      }
      case 3:
        return Number();
      case 4:
        return Object(depth);
      default: {
        std::string out = absl::StrCat("[", Ws());
        const int n = Pick(0, 3);
        for (int i = 0; i < n; ++i) {
          if (i > 0) absl::StrAppend(&out, ",", Ws());
          absl::StrAppend(&out, Value(depth + 1), Ws());
        }
        out += ']';
        return out;
      }
    }
  }

  std::string String() {
    static const char* pieces[] = {"a",
                                   "key",
                                   " ",
                                   "\\n",
                                   "\\\"",
                                   "\\\\",
                                   "\\u00e9",
                                   "Z9",
                                   "\\/",
                                   "x y",
                                   "\xc3\xa9",
                                   "\xe2\x82\xac",
                                   "\xf0\x9f\x98\x80"};
    std::string out = "\"";
    const int n = Pick(0, 4);
    for (int i = 0; i < n; ++i) out += pieces[Pick(0, 12)];
    out += '"';
    return out;
  }

  std::string Number() {
    std::string out = Pick(0, 3) == 0 ? "-" : "";
    absl::StrAppend(&out, Pick(0, 4) == 0 ? 0 : Pick(1, 99999));
    if (Pick(0, 2) == 0) absl::StrAppend(&out, ".", Pick(0, 999));
    if (Pick(0, 4) == 0) {
      absl::StrAppend(&out, Pick(0, 1) ? "e" : "E", Pick(0, 1) ? "-" : "", Pick(0, 30));
    }
    return out;
  }

  std::string Ws() {
    static const char* ws[] = {"", "", "", " ", "\n  ", "\t"};
    return ws[Pick(0, 5)];
  }

  int Pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
};

// Whether nlohmann parses `text` as an object; nullopt when it cannot tell (a number overflows
// a double: its lexer stops there, before any later syntax error).
std::optional<bool> NlohmannObject(const std::string& text) {
  // The matcher allows no whitespace after the root value.
  if (!text.empty() &&
      (text.back() == ' ' || text.back() == '\n' || text.back() == '\t' || text.back() == '\r')) {
    return false;
  }
  try {
    return nlohmann::json::parse(text).is_object();
  } catch (const nlohmann::json::out_of_range&) {
    return std::nullopt;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

TEST(JsonMatcherTest, AnyObjectAcceptsExactlyWhatAJsonParserAcceptsAsAnObject) {
  const JsonGrammar g = AnyJsonObjectGrammar();
  JsonGen gen(7);
  // ASCII syntax plus bytes that make ill-formed UTF-8 (a stray continuation, a lead without
  // its continuation, a surrogate lead, an invalid byte).
  static const char kAlphabet[] = "{}[]\":,-.0123456789eE+ \ntfnrulsa\\x\x80\xa9\xc3\xed\xff";
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = gen.Object(0);
    ASSERT_EQ(NlohmannObject(text), std::optional<bool>(true)) << text;
    ASSERT_TRUE(Accepts(g, text)) << text;
    // Every prefix is viable.
    JsonMatchState s;
    for (size_t n = 0; n <= text.size(); n += 1 + text.size() / 7) {
      ASSERT_TRUE(Feed(g, text.substr(0, n), &s)) << text.substr(0, n);
    }
    // One mutation: replace, insert or delete a byte.
    const size_t at = static_cast<size_t>(gen.Pick(0, static_cast<int>(text.size()) - 1));
    const char c = kAlphabet[gen.Pick(0, sizeof(kAlphabet) - 2)];
    switch (gen.Pick(0, 2)) {
      case 0:
        text[at] = c;
        break;
      case 1:
        text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c);
        break;
      default:
        text.erase(at, 1);
    }
    const std::optional<bool> expected = NlohmannObject(text);
    if (!expected) continue;
    ASSERT_EQ(Accepts(g, text), *expected) << "'" << text << "'";
    (*expected ? accepted : rejected) += 1;
  }
  // Both outcomes were exercised.
  EXPECT_GT(accepted, 300);
  EXPECT_GT(rejected, 300);
}

TEST(JsonMatcherTest, RootMustBeAnObjectWithNothingAfterIt) {
  ExpectVerdicts(AnyJsonObjectGrammar(),
                 {"{}", " \n{\"a\": [1, 2.5e3, {\"b\": null}], \"c\": \"\\u00e9\"}"},
                 {"[]", "\"text\"", "12", "{} ", "{}{}", "{\"a\":1,}", "{\"a\":01}",
                  "{\"a\":\"\x01\"}",   // a control byte inside a string
                  "{\"a\":\"\\x\"}"});  // an unknown escape
}

TEST(JsonMatcherTest, SurrogateEscapesComeOnlyAsPairs) {
  // What JSON parsers accept (nlohmann refuses a lone half), as one code point.
  const std::string pair = R"({"a":"\uD83D\ude00"})";
  const std::string lone_high = R"({"a":"\uD83D"})";
  const std::string lone_low = R"({"a":"\uDE00x"})";
  const std::string high_then_text = R"({"a":"\uD83Dx"})";
  const std::string two_highs = R"({"a":"\uD83D\uD83D"})";
  ExpectVerdicts(AnyJsonObjectGrammar(), {pair}, {lone_high, lone_low, high_then_text, two_highs});
  EXPECT_TRUE(nlohmann::json::accept(pair));
  for (const std::string& bad : {lone_high, lone_low, high_then_text, two_highs}) {
    EXPECT_FALSE(nlohmann::json::accept(bad)) << bad;
  }
  absl::StatusOr<JsonGrammar> one = CompileJsonSchema(Json::parse(R"({"maxLength":1})"));
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(Accepts(*one, R"("\uD83D\uDE00")"));
  EXPECT_FALSE(Accepts(*one, R"("\uD83D\uDE00x")"));
}

TEST(JsonMatcherTest, LimitsBoundWhitespaceNumbersAndDepth) {
  const JsonGrammar g = AnyJsonObjectGrammar();
  auto wrap = [](const char* open, size_t n, char c, const char* close) {
    return absl::StrCat(open, std::string(n, c), close);
  };
  EXPECT_TRUE(Accepts(g, wrap("{", kMaxWhitespaceRun, ' ', "}")));
  EXPECT_FALSE(Accepts(g, wrap("{", kMaxWhitespaceRun + 1, ' ', "}")));
  EXPECT_TRUE(Accepts(g, wrap("{\"n\":", kMaxNumberBytes, '7', "}")));
  EXPECT_FALSE(Accepts(g, wrap("{\"n\":", kMaxNumberBytes + 1, '7', "}")));
  // Root object + (kMaxDepth − 1) arrays fit; one more does not.
  auto deep = [](size_t n) {
    return absl::StrCat("{\"a\":", std::string(n, '['), std::string(n, ']'), "}");
  };
  EXPECT_TRUE(Accepts(g, deep(kMaxDepth - 1)));
  EXPECT_FALSE(Accepts(g, deep(kMaxDepth)));
}

}  // namespace
}  // namespace strata::structured
