// Pre-tokenization: splits text into pieces with a tiktoken-style regex, through PCRE2 with JIT,
// UTF-8 and Unicode properties (PCRE2_UCP, so \s \w \d are Unicode-aware).
//
// Contract of Split(): the pieces are non-empty, in order, and concatenate to the input exactly.
// Text the pattern does not match becomes a piece of its own; with the built-in patterns that
// only happens to ill-formed UTF-8 (compiled with PCRE2_MATCH_INVALID_UTF, an ill-formed
// sequence never matches), so invalid input never fails and still round-trips byte-exactly.
//
// Thread-safe: the compiled pattern is shared; each Split() uses its own match data and a
// per-thread JIT stack.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace strata::engine {

// Patterns of the known encodings, in PCRE2 syntax.
// Kimi's pattern (Kimi-K2 tokenization_kimi.py) is written for Rust's regex crate: its class
// intersections `[X&&[^\p{Han}]]` are translated to complement classes (see pretokenizer.cc) and
// `\p{Han}` becomes `\p{sc=Han}`, because a bare script name means the Script property in Rust
// but Script_Extensions in PCRE2 >= 10.40 (which would put U+3001 "、" into the Han run).
std::string_view KimiPattern();
std::string_view Cl100kPattern();
std::string_view O200kPattern();

// Kimi's pattern exactly as tokenization_kimi.py writes it (Rust regex syntax).
std::string_view KimiPatternOriginal();

// Rewrites a Rust-regex (tiktoken) pattern for PCRE2: `\s`/`\S` become the White_Space class,
// a bare script name `\p{Han}` becomes `\p{sc:Han}`, and `[A&&[^B]]` becomes
// `(?:(?![B])[A])`. PCRE2-only syntax passes through unchanged.
std::string TranslateRustPattern(std::string_view pattern);

// TranslateRustPattern, except that Kimi's original pattern maps to the hand-written (faster,
// equivalent) KimiPattern().
std::string TranslatePattern(std::string_view pattern);

class PreTokenizer {
 public:
  // Compiles `pattern` (after TranslatePattern). Errors carry PCRE2's message and offset.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(std::string_view pattern);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Calls `piece` for each piece of `text` (see the contract above).
  void Split(std::string_view text, absl::FunctionRef<void(std::string_view)> piece) const;

  const std::string& pattern() const { return pattern_; }

 private:
  PreTokenizer() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace strata::engine
