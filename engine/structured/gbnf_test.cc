// GBNF grammars: what each construct accepts and refuses (fed byte by byte through the matcher),
// agreement with the regex compiler on random texts where both describe the same language, the
// refusals (each names what was wrong and where), and the matcher's state keys.
#include "engine/structured/gbnf.h"

#include <random>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "engine/structured/cfg_matcher.h"
#include "engine/structured/gbnf_examples.h"
#include "engine/structured/regex.h"

namespace strata::structured {
namespace {

// Compiles `text` into `var`, failing the test (and leaving it) when it does not compile.
#define ASSERT_COMPILES(var, text)                                   \
  absl::StatusOr<CfgGrammar> var##_or = CompileGbnf(text);           \
  ASSERT_TRUE(var##_or.ok()) << (text) << "\n" << var##_or.status(); \
  const CfgGrammar& var = *var##_or

// Feeds `text` from the start; false as soon as a byte is refused.
bool Feed(const CfgGrammar& g, std::string_view text, CfgMatchState* state) {
  *state = CfgMatchState::Start(g);
  CfgMatchState next;
  for (char c : text) {
    if (!state->Advance(g, static_cast<uint8_t>(c), &next)) return false;
    std::swap(*state, next);
  }
  return true;
}

bool Accepts(const CfgGrammar& g, std::string_view text) {
  CfgMatchState s;
  return Feed(g, text, &s) && s.CanFinish();
}

void ExpectVerdicts(std::string_view grammar, std::initializer_list<std::string> accepted,
                    std::initializer_list<std::string> rejected) {
  ASSERT_COMPILES(g, grammar);
  for (const std::string& text : accepted) EXPECT_TRUE(Accepts(g, text)) << grammar << ": " << text;
  for (const std::string& text : rejected)
    EXPECT_FALSE(Accepts(g, text)) << grammar << ": " << text;
}

TEST(Gbnf, LiteralsAlternativesAndRules) {
  ExpectVerdicts(R"(root ::= "yes" | "no")", {"yes", "no"}, {"", "y", "yes ", "noyes", "No"});
  // Rules used before they are defined, spread over lines, with comments and empty alternatives.
  ExpectVerdicts(R"(# answers
root ::= greeting
         name   # who
greeting ::= "hi " | "hello " |
name ::= "bob" | "al"
         "ice")",
                 {"hi bob", "hello alice", "bob", "alice"}, {"hi ", "hi al", "hibob"});
  ExpectVerdicts(R"(root ::= "")", {""}, {"a"});
}

TEST(Gbnf, Repetitions) {
  ExpectVerdicts(R"(root ::= "a"*)", {"", "a", "aaaaaaaaaaaaaaaa"}, {"b", "ab"});
  ExpectVerdicts(R"(root ::= "ab"+)", {"ab", "abab"}, {"", "a", "aba"});
  ExpectVerdicts(R"(root ::= "a"? "b")", {"b", "ab"}, {"aab", "a"});
  ExpectVerdicts(R"(root ::= "a"{3})", {"aaa"}, {"aa", "aaaa"});
  ExpectVerdicts(R"(root ::= "a"{2,})", {"aa", "aaaaaaa"}, {"", "a"});
  ExpectVerdicts(R"(root ::= "a"{2,4})", {"aa", "aaa", "aaaa"}, {"a", "aaaaa"});
  ExpectVerdicts(R"(root ::= "a"{,2} "b")", {"b", "ab", "aab"}, {"aaab"});
  ExpectVerdicts(R"(root ::= "x" "a"{0} "y")", {"xy"}, {"xay"});
  ExpectVerdicts(R"(root ::= ("ab" | "c"){2} [0-9]{1,3})", {"abc1", "cc123", "abab00"},
                 {"ab1", "abc1234", "abcab1"});
}

TEST(Gbnf, ClassesMatchCodePoints) {
  ExpectVerdicts(R"(root ::= [a-cx] [^a-z] .)", {"a01", "xZé", "b\xc3\xa9\xf0\x9f\x98\x80"},
                 {"d01", "aa1", "a1", "a1\xc3", "a1\xc0\x80", "a1\xed\xa0\x80"});
  // A negated class takes every code point but its own, in any encoded length.
  ExpectVerdicts(R"(root ::= [^"\\]*)", {"", "plain text", "\xe2\x82\xac\xf4\x8f\xbf\xbf"},
                 {"a\"", "\\", "\xff", "\xf4\x90\x80\x80"});
  ExpectVerdicts(R"(root ::= [\]\-\[]+ [\x41-\x43\u00e9] "\u20ac\U0001F600")",
                 {"]-[A\xe2\x82\xac\xf0\x9f\x98\x80", "-\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"},
                 {"aA\xe2\x82\xac\xf0\x9f\x98\x80"});
  ExpectVerdicts("root ::= \"\\n\\t\\\"\\\\\" [\\n]", {"\n\t\"\\\n"}, {"\n\t\"\\ "});
}

TEST(Gbnf, RecursionNestsToAnyDepth) {
  ASSERT_COMPILES(g, R"g(root ::= item*
item ::= "(" root ")" | "x")g");
  for (const char* ok : {"", "x", "()", "(x)(())x", "((((((((((x))))))))))"}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  }
  for (const char* bad : {"(", "())", "(()", ")("}) EXPECT_FALSE(Accepts(g, bad)) << bad;
  std::string deep = std::string(300, '(') + std::string(300, ')');
  EXPECT_TRUE(Accepts(g, deep));
}

TEST(Gbnf, JsonGrammar) {
  ASSERT_COMPILES(g, kJsonObjectGbnf);
  for (const char* ok :
       {R"({})", R"({"a": [1, 2.5, -3e7, "x\u00e9y"], "b": {"c": null}})", "{\"k\": true}\n  "}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  }
  for (const char* bad :
       {R"([])", R"({"a" 1})", R"({"a": 01})", R"({"a": "\q"})", "{\"a\":\"\x01\"}"}) {
    EXPECT_FALSE(Accepts(g, bad)) << bad;
  }
}

// Where a GBNF grammar and a regular expression describe the same language, they agree on
// random texts over the alphabet both use (short texts, so many are accepted).
TEST(Gbnf, AgreesWithTheRegexCompiler) {
  struct Pair {
    const char* gbnf;
    const char* regex;
  };
  const Pair pairs[] = {
      {R"(root ::= [ab]* "c"{1,3})", "[ab]*c{1,3}"},
      {R"(root ::= ("a" | "bc")+ "é"?)", "(a|bc)+é?"},
      {R"(root ::= x{2,} | "c"
x ::= [^c])",
       "[^c]{2,}|c"},
      {R"(root ::= ("a" [bc]?){1,3} .)", "(a[bc]?){1,3}[\\s\\S]"},
      {R"(root ::= "a"{,2} ("b" "c"*)*)", "a{0,2}(bc*)*"},
  };
  const std::string alphabet[] = {"a", "b", "c", "\xc3\xa9", "\xc3", "\xff"};
  std::mt19937 rng(7);
  for (const Pair& p : pairs) {
    ASSERT_COMPILES(g, p.gbnf);
    absl::StatusOr<ByteDfa> dfa = CompileRegex(p.regex, RegexAnchoring::kFullMatch);
    ASSERT_TRUE(dfa.ok()) << dfa.status();
    int accepted = 0;
    for (int trial = 0; trial < 3000; ++trial) {
      std::string text;
      const int n = std::uniform_int_distribution<int>(0, 6)(rng);
      for (int i = 0; i < n; ++i) text += alphabet[std::uniform_int_distribution<int>(0, 5)(rng)];
      int32_t s = dfa->start;
      for (char c : text) {
        if (s != ByteDfa::kDead) s = dfa->Next(s, static_cast<uint8_t>(c));
      }
      const bool expected = s != ByteDfa::kDead && dfa->Accepting(s);
      EXPECT_EQ(Accepts(g, text), expected) << p.gbnf << " on '" << text << "'";
      accepted += expected;
    }
    EXPECT_GT(accepted, 20) << p.gbnf;  // the comparison covered both verdicts
  }
}

TEST(Gbnf, StatesReachedTwoWaysHaveOneKey) {
  ASSERT_COMPILES(g, R"(root ::= [a-z]* ("!" | "?"))");
  CfgMatchState a, b, c;
  ASSERT_TRUE(Feed(g, "a", &a));
  ASSERT_TRUE(Feed(g, "abcdefg", &b));
  ASSERT_TRUE(Feed(g, "ab!", &c));
  EXPECT_EQ(a.key(), b.key());
  EXPECT_NE(a.key(), c.key());
  EXPECT_FALSE(a.CanFinish());
  EXPECT_TRUE(c.CanFinish());
  // An ambiguous grammar: both parses lead to one state, counted once.
  ASSERT_COMPILES(amb, R"(root ::= x | y
x ::= "a" "b"*
y ::= "a" "b"*)");
  CfgMatchState s;
  ASSERT_TRUE(Feed(amb, "abbb", &s));
  CfgMatchState t;
  ASSERT_TRUE(Feed(amb, "ab", &t));
  EXPECT_EQ(s.key(), t.key());
  // Identical stacks merge: two ways to read each "a" do not double the state per byte.
  ASSERT_COMPILES(twice, R"(root ::= ("a" | "a")*)");
  ASSERT_TRUE(Feed(twice, "a", &s));
  ASSERT_TRUE(Feed(twice, std::string(20, 'a'), &t));
  EXPECT_EQ(s.key(), t.key());
}

TEST(Gbnf, RefusalsNameWhatAndWhere) {
  struct Case {
    std::string grammar;
    std::string message;
  };
  std::string too_many;
  for (int i = 0; i < 300; ++i) absl::StrAppend(&too_many, "r", i, " ::= \"a\"{1000}\n");
  absl::StrAppend(&too_many, "root ::= r0\n");
  const Case cases[] = {
      {"", "no rule named 'root'"},
      {"other ::= \"a\"", "no rule named 'root'"},
      {"root ::= \"a\"\n  foo", "line 2, column 3: rule 'foo' is used but not defined"},
      {"root ::= \"a\"\nroot ::= \"b\"",
       "line 2, column 1: rule 'root' is defined twice (first on line 1)"},
      {"root ::= root \"a\" | \"a\"", "left-recursive (root → root"},
      {"root ::= a\na ::= b \"x\"\nb ::= \"\" | a", "left-recursive (a → b → a"},
      {"root ::= (\"a\"?)*", "left-recursive"},
      {"root ::= \"a\" root", "rule 'root' can never finish"},
      {"root ::= \"abc", "line 1, column 10: the string literal is not closed"},
      {"root ::= [abc", "the character class is not closed"},
      {"root ::= [z-a]", "runs backwards"},
      {"root ::= [^\\x00-\\U0010FFFF]", "the character class matches nothing"},
      {"root ::= \"a\"{3,2}", "maximum is below its minimum"},
      {"root ::= \"a\"{1001}", "over 1000 (the limit)"},
      {"root ::= \"a\"{}", "expected {m}, {m,}, {m,n} or {,n}"},
      {"root ::= (\"a\"", "expected ')' to close the group opened on line 1"},
      {"root ::= \"a\" )", "')' closes no group"},
      {"root ::= *", "'*' repeats nothing"},
      {"root ::= <think>", "token references"},
      {"root ::= \"\\q\"", "unknown escape '\\q'"},
      {"root ::= \"\\uD800\"", "not a Unicode scalar value"},
      {"root ::= \"\\x4\"", "'\\x' takes 2 hex digits"},
      {"root ::= \"\xff\"", "not well-formed UTF-8"},
      {"root = \"a\"", "expected '::=' after the rule name 'root'"},
      {"start: \"a\"", "expected '::=' after the rule name 'start'"},
      {"root ::= \"a\" ; \"b\"", "unexpected ';'"},
      // The character a message quotes is whole (messages go into JSON error bodies).
      {"root ::= \"a\" \xd9\xa4", "unexpected '\xd9\xa4'"},
      {"root ::= \"a\" \xd9\x61", "unexpected '\\xD9'"},  // 0xD9 then 'a': no character
      {"root ::= \"\\\xc3\xa9\"", "unknown escape '\\\xc3\xa9'"},
      {std::string(64 * 1024 + 1, ' '), "the limit is 65536"},
      {std::string("root ::= ") + std::string(65, '(') + "\"a\"" + std::string(65, ')'),
       "groups nest deeper than 64"},
      {too_many, "more than 262144 elements"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CfgGrammar> g = CompileGbnf(c.grammar);
    ASSERT_FALSE(g.ok()) << c.grammar.substr(0, 80);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.message), std::string_view::npos)
        << g.status().message() << "\nwanted: " << c.message;
  }
}

}  // namespace
}  // namespace strata::structured
