// Context-free grammars in GBNF — llama.cpp's grammar format, which xgrammar (behind vLLM's
// guided_grammar / structured_outputs.grammar and SGLang's ebnf) reads as its EBNF too —
// compiled into a byte-level grammar for the grammar matcher (cfg_matcher.h).
//
//   # a comment
//   root   ::= answer ("," ws answer)*
//   answer ::= "yes" | "no" | [0-9]{1,3}
//   ws     ::= [ \t\n]*
//
// Supported: rules `name ::= alternatives` (names of letters, digits, `-` and `_`; a rule may
// span lines; the next rule starts at the next `name ::=`), alternation `|`, sequences,
// groups `( … )`, string literals `"…"`, character classes `[…]` / `[^…]` with ranges, `.` (any
// code point), repetition `* + ? {m} {m,} {m,n} {,n}`, escapes `\n \r \t \\ \" \[ \] \- \xHH
// \uHHHH \UHHHHHHHH` (and any escaped punctuation), comments `#` to the end of the line.
// Generation starts at the rule `root`. Classes match code points, so every accepted text is
// well-formed UTF-8.
//
// Refused with an InvalidArgument naming the line and column or the rule: syntax errors,
// undefined or twice-defined rules, no `root`, left recursion (direct, indirect, or behind rules
// that may match nothing: the matcher expands rules top-down), rules that can never finish,
// classes that match nothing, token references `<…>`, and grammars past the limits below.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::structured {

inline constexpr size_t kMaxGrammarBytes = 64 * 1024;  // grammar text
inline constexpr int kMaxGrammarRepeat = 1000;         // m and n in {m,n}
inline constexpr size_t kMaxGrammarElements = size_t{1} << 18;
inline constexpr int kMaxGrammarNesting = 64;  // groups inside groups

struct CfgElement {
  enum Kind : uint8_t {
    kEnd,    // the end of an alternative
    kBytes,  // one byte in [lo, hi]
    kRule,   // the rule `rule`
  };
  Kind kind = kEnd;
  uint8_t lo = 0;
  uint8_t hi = 0;
  int32_t rule = -1;
};

// Every alternative of every rule is a run of elements in `elements` closed by a kEnd; the empty
// alternative is a lone kEnd. No rule is left-recursive and every rule can finish, so expanding
// rules at the start of a text always terminates and every parse can be completed.
struct CfgGrammar {
  std::vector<CfgElement> elements;
  std::vector<std::vector<int32_t>> alternatives;  // [rule] → the positions where each starts
  // [rule] → its name in the text; rules made for groups, classes and repetitions are named
  // after the rule they appear in: `answer_2`.
  std::vector<std::string> rule_names;
  int32_t root = 0;
};

absl::StatusOr<CfgGrammar> CompileGbnf(std::string_view text);

}  // namespace strata::structured
