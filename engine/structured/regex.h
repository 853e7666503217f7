// Regular expressions (the ECMA-262 syntax JSON Schema's `pattern` uses, and vLLM's
// guided_regex) compiled to a deterministic automaton over UTF-8 bytes, for the structured-output
// matcher (json_matcher.h): a string's decoded bytes step it one at a time.
//
// Supported: literals (any UTF-8 text), `.`, classes `[…]` / `[^…]` with ranges, `\d \D \w \W
// \s \S`, escapes (`\t \n \r \f \v \0 \xHH \uHHHH \u{H…}` and escaped punctuation), groups
// `(…)`, `(?:…)`, `(?<name>…)`, alternation, quantifiers `* + ? {n} {n,} {n,m}` (lazy `?`
// suffixes accepted: the language is the same), `^` at the start and `$` at the end of a
// top-level alternative. Classes and `.` match code points (`.` any but the ECMA line
// terminators), so every accepted byte string is well-formed UTF-8.
// Refused with an InvalidArgument naming the construct and its byte offset: lookarounds,
// backreferences, `\b` / `\B`, anchors elsewhere, flags, and patterns whose automaton exceeds
// the limits below.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::structured {

inline constexpr size_t kMaxRegexBytes = 4096;    // pattern text
inline constexpr int kMaxRegexRepeat = 1000;      // n and m in {n,m}
inline constexpr int kMaxRegexNfaStates = 40000;  // after expanding repetitions
inline constexpr int kMaxRegexDfaStates = 65536;
inline constexpr size_t kMaxRegexDfaCells = size_t{1} << 21;  // states × byte classes (8 MiB)

enum class RegexAnchoring : uint8_t {
  kFullMatch,  // the whole text matches (guided_regex)
  kSearch,     // the text contains a match; `^` / `$` anchor it (JSON Schema `pattern`)
};

// A DFA over bytes. States from which no accepting state can be reached are removed (their
// transitions read −1), so a byte the automaton takes always leaves a way to accept.
struct ByteDfa {
  static constexpr int32_t kDead = -1;

  std::array<uint8_t, 256> byte_class{};  // bytes with the same transitions share a class
  int32_t num_classes = 1;
  std::vector<int32_t> next;  // [state × num_classes + class]: the next state or kDead
  std::vector<uint8_t> accepting;
  // The fewest and the most code points (UTF-8 lead bytes) still to come before an accepting
  // state; kUnbounded when a loop can repeat on the way.
  std::vector<int32_t> min_code_points;
  std::vector<int32_t> max_code_points;
  static constexpr int32_t kUnbounded = INT32_MAX;
  int32_t start = 0;

  int32_t Next(int32_t state, uint8_t byte) const {
    return next[static_cast<size_t>(state) * static_cast<size_t>(num_classes) + byte_class[byte]];
  }
  bool Accepting(int32_t state) const { return accepting[static_cast<size_t>(state)] != 0; }
  int32_t num_states() const { return static_cast<int32_t>(accepting.size()); }
};

// Compiles `pattern`. Errors name the construct and its offset in the pattern.
absl::StatusOr<ByteDfa> CompileRegex(std::string_view pattern, RegexAnchoring anchoring);

}  // namespace strata::structured
