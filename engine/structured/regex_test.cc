// The regex automaton against std::regex (ECMAScript grammar, an independent implementation) on
// random strings, Unicode classes against hand-checked cases, the minimum code points to
// acceptance, and the errors for what it refuses.
#include "engine/structured/regex.h"

#include <random>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace strata::structured {
namespace {

// Runs `text` through the automaton: whether it ends in an accepting state.
bool Matches(const ByteDfa& dfa, std::string_view text) {
  int32_t s = dfa.start;
  for (char c : text) {
    s = dfa.Next(s, static_cast<uint8_t>(c));
    if (s == ByteDfa::kDead) return false;
  }
  return dfa.Accepting(s);
}

ByteDfa MustCompile(std::string_view pattern, RegexAnchoring anchoring) {
  absl::StatusOr<ByteDfa> dfa = CompileRegex(pattern, anchoring);
  EXPECT_TRUE(dfa.ok()) << pattern << ": " << dfa.status();
  return dfa.ok() ? *std::move(dfa) : ByteDfa{};
}

TEST(RegexTest, AgreesWithStdRegexOnRandomAsciiStrings) {
  // Random texts are concatenations of the case's pieces, so both verdicts come up often.
  struct Case {
    const char* pattern;
    std::vector<std::string> pieces;
  };
  const Case cases[] = {
      {"^[a-c]+$", {"a", "b", "c", "d"}},
      {"ab|cd", {"a", "b", "c", "d", "x"}},
      {"^(ab|a)*c$", {"a", "b", "c"}},
      {"^a{2,4}b?$", {"a", "b"}},
      {"^a{3}$", {"a"}},
      {"^a{2,}$", {"a", "b"}},
      {"x.y", {"x", "y", "\n", "z"}},
      {"^[^a-c]*$", {"a", "b", "d", "z", "\n"}},
      {"^\\d{3}-\\d{4}$", {"1", "2", "-", "a", "123", "4567"}},
      {"^\\w+@\\w+\\.com$", {"ab", "@", ".com", "_", "x", "."}},
      {"\\s", {" ", "\t", "a", "b", "\n"}},
      {"^[\\S]+$", {" ", "a", "b"}},
      {"^(?:a|b)+(c|d)?$", {"a", "b", "c", "d"}},
      {"^[-a]+$", {"-", "a", "b"}},
      {"^[a\\-z]+$", {"-", "a", "z", "b"}},
      {"^\\(\\d+\\)$", {"(", ")", "1"}},
      {"^(a*)*b$", {"a", "b"}},
      {"^(a?){2}(b|)$", {"a", "b"}},
      {"a{0}b", {"a", "b"}},
      {"^[\\]a]+$", {"]", "a", "b"}},
      {"^\\x41\\u0042$", {"A", "B", "C"}},
      {"^a+?b??$", {"a", "b"}},
      {"^\\D\\W$", {"a", "1", " ", "_"}},
      {"^[A-Fa-f0-9]{2}(:[A-Fa-f0-9]{2}){2}$", {"0a", ":1F", ":g1"}},
      {"colou?r|grey", {"colo", "u", "r", "grey", "gr", "ey"}},
      {"^$", {"a"}},
      {"^a|b$", {"a", "b", "c"}},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    const ByteDfa search = MustCompile(c.pattern, RegexAnchoring::kSearch);
    const ByteDfa full = MustCompile(c.pattern, RegexAnchoring::kFullMatch);
    const std::regex oracle(c.pattern, std::regex::ECMAScript);
    int matched = 0;
    for (int trial = 0; trial < 1500; ++trial) {
      std::string text;
      const int len = std::uniform_int_distribution<int>(0, 6)(rng);
      for (int i = 0; i < len; ++i) {
        text += c.pieces[std::uniform_int_distribution<size_t>(0, c.pieces.size() - 1)(rng)];
      }
      const bool expected = std::regex_search(text, oracle);
      matched += expected;
      ASSERT_EQ(Matches(search, text), expected) << c.pattern << " on '" << text << "'";
      // Full match: the whole text is a match (std::regex_match) — for patterns whose anchors
      // are only at the ends, which is what kFullMatch assumes.
      ASSERT_EQ(Matches(full, text), std::regex_match(text, oracle))
          << c.pattern << " on '" << text << "' (full)";
    }
    EXPECT_GT(matched, 0) << c.pattern;  // both verdicts come up
    EXPECT_LT(matched, 1500) << c.pattern;
  }
}

TEST(RegexTest, ClassesAndDotMatchCodePoints) {
  const ByteDfa greek = MustCompile("^[α-ω]{2}$", RegexAnchoring::kSearch);
  EXPECT_TRUE(Matches(greek, "αβ"));
  EXPECT_FALSE(Matches(greek, "ab"));
  EXPECT_FALSE(Matches(greek, "α"));
  EXPECT_FALSE(Matches(greek, "\xce\xb1\xce"));  // cut inside a code point
  const ByteDfa dot = MustCompile("^.$", RegexAnchoring::kSearch);
  for (const char* one : {"a", "é", "€", "😀"}) EXPECT_TRUE(Matches(dot, one)) << one;
  for (const char* not_one : {"", "ab", "\n", "\xed\xa0\x80", "\xc0\xaf", "\xff"}) {
    EXPECT_FALSE(Matches(dot, not_one)) << not_one;  // incl. a surrogate and an overlong
  }
  const ByteDfa negated = MustCompile("^[^a]+$", RegexAnchoring::kSearch);
  EXPECT_TRUE(Matches(negated, "€😀\n"));
  EXPECT_FALSE(Matches(negated, "€a"));
  EXPECT_TRUE(Matches(MustCompile("^\\u{1F600}\\u00e9$", RegexAnchoring::kSearch), "😀é"));
  EXPECT_TRUE(Matches(MustCompile("^\\s$", RegexAnchoring::kSearch), "\u3000"));
  EXPECT_TRUE(Matches(MustCompile("日本", RegexAnchoring::kSearch), "x日本y"));
}

TEST(RegexTest, CodePointBoundsCountTheShortestAndLongestWayToAccept) {
  const ByteDfa dfa = MustCompile("^[a-zé]{3,5}$", RegexAnchoring::kSearch);
  EXPECT_EQ(dfa.min_code_points[static_cast<size_t>(dfa.start)], 3);
  EXPECT_EQ(dfa.max_code_points[static_cast<size_t>(dfa.start)], 5);
  EXPECT_EQ(MustCompile("^ab*c$", RegexAnchoring::kSearch).max_code_points[0], ByteDfa::kUnbounded);
  const ByteDfa fixed = MustCompile("^(ab|cde)f?$", RegexAnchoring::kFullMatch);
  EXPECT_EQ(fixed.max_code_points[static_cast<size_t>(fixed.start)], 4);
  EXPECT_EQ(fixed.min_code_points[static_cast<size_t>(fixed.start)], 2);
  int32_t s = dfa.Next(dfa.start, 0xC3);  // the lead byte of é
  ASSERT_NE(s, ByteDfa::kDead);
  EXPECT_EQ(dfa.min_code_points[static_cast<size_t>(s)], 2);  // é's code point is under way
  s = dfa.Next(s, 0xA9);
  EXPECT_EQ(dfa.min_code_points[static_cast<size_t>(s)], 2);
  // Pruning: every transition the automaton keeps leads to a state that can still accept.
  const ByteDfa dead_end = MustCompile("^(ab|a[^\\s\\S])$", RegexAnchoring::kSearch);
  const int32_t a = dead_end.Next(dead_end.start, 'a');
  ASSERT_NE(a, ByteDfa::kDead);
  EXPECT_NE(dead_end.Next(a, 'b'), ByteDfa::kDead);
  for (int b = 0; b < 256; ++b) {
    if (b != 'b') {
      EXPECT_EQ(dead_end.Next(a, static_cast<uint8_t>(b)), ByteDfa::kDead) << b;
    }
  }
}

TEST(RegexTest, RefusesWhatItCannotEnforceNamingTheConstructAndOffset) {
  struct Case {
    const char* pattern;
    const char* message;
  };
  const Case cases[] = {
      {"a(?=b)", "byte 1: lookaround"},
      {"(a)\\1", "byte 3: backreferences"},
      {"\\bword", "byte 0: word boundaries"},
      {"a^b", "byte 1: '^' is supported only at the start"},
      {"(a$)", "'$' is supported only at the end"},
      {"(ab", "byte 0: '(' without its ')'"},
      {"ab)", "unbalanced ')'"},
      {"[ab", "'[' without its ']'"},
      {"a**", "nothing to repeat"},
      {"*a", "nothing to repeat"},
      {"a{1001}", "above 1000"},
      {"a{3,2}", "m < n"},
      {"[z-a]", "out of order"},
      {"\\p{L}", "property escapes"},
      {"(?i)a", "inline flags"},
      {"\\q", "unknown escape '\\q'"},
      {"[^\\s\\S]", "matches no string"},
      {"(a|b)*a(a|b){17}", "more than 65536 states (the limit)"},  // 2^18 states
      {"(\\w+\\s*){1000}", "takes more than 50000000 steps (the limit)"},
      {".{1000}.{1000}", "more than 40000 automaton states"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ByteDfa> dfa = CompileRegex(c.pattern, RegexAnchoring::kSearch);
    ASSERT_FALSE(dfa.ok()) << c.pattern;
    EXPECT_EQ(dfa.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(dfa.status().message().find(c.message), std::string::npos)
        << c.pattern << ": " << dfa.status().message();
  }
  EXPECT_FALSE(CompileRegex(std::string(kMaxRegexBytes + 1, 'a'), RegexAnchoring::kSearch).ok());
  EXPECT_FALSE(CompileRegex("\xff", RegexAnchoring::kSearch).ok());  // not UTF-8
}

// A fuzzer's find: a counted repetition of alternatives with near-universal classes. Its
// search automaton has ~23,000 states of ~34 NFA states each (the old subset construction took
// seconds under the fuzzer's sanitizers). It either compiles within the limits, agreeing with
// std::regex, or is refused naming them.
TEST(RegexTest, LargeRepetitionOfClassAlternativesCompilesOrIsRefused) {
  const char* pattern = R"((?:g|bc[^d\sc(2{,]]ab|c[bc^d\S]){24}x?$)";
  const std::regex oracle(pattern, std::regex::ECMAScript);
  std::string match;
  for (int i = 0; i < 24; ++i) match += i % 3 == 0 ? "g" : i % 3 == 1 ? "bcz]ab" : "cc";
  for (RegexAnchoring anchoring : {RegexAnchoring::kSearch, RegexAnchoring::kFullMatch}) {
    absl::StatusOr<ByteDfa> dfa = CompileRegex(pattern, anchoring);
    if (!dfa.ok()) {
      EXPECT_EQ(dfa.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(dfa.status().message().find("(the limit)"), std::string::npos) << dfa.status();
      continue;
    }
    EXPECT_LE(dfa->num_states(), kMaxRegexDfaStates);
    for (const std::string& text : {match, match + "x", "q" + match, match.substr(1), match + "y",
                                    std::string(24, 'g'), std::string(23, 'g')}) {
      const bool expected = anchoring == RegexAnchoring::kSearch ? std::regex_search(text, oracle)
                                                                 : std::regex_match(text, oracle);
      EXPECT_EQ(Matches(*dfa, text), expected) << text;
    }
  }
}

}  // namespace
}  // namespace strata::structured
