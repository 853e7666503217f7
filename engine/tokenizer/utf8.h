// UTF-8 helpers shared by the tokenizer, the detokenizer and the template engine.
//
// Decoding follows the WHATWG / Unicode "maximal subpart" practice: every maximal prefix of a
// well-formed sequence that cannot be completed becomes one U+FFFD, and the byte that broke it
// is decoded again. Python's `bytes.decode('utf-8', 'replace')`, JavaScript's TextDecoder and
// Rust's `String::from_utf8_lossy` all agree on this, so streaming and one-shot decodes agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::engine {

inline constexpr char32_t kReplacementChar = 0xFFFD;

enum class Utf8Status {
  kChar,        // a complete, well-formed character of `length` bytes
  kInvalid,     // `length` (>= 1) bytes form an ill-formed subpart: emit one U+FFFD
  kIncomplete,  // the `length` remaining bytes are a valid prefix of a character cut short
};

struct Utf8Step {
  Utf8Status status;
  size_t length;
  char32_t code_point;  // meaningful for kChar only
};

// Decodes one step at the start of `bytes` (must be non-empty).
Utf8Step DecodeUtf8Step(std::string_view bytes);

// True when `bytes` is entirely well-formed UTF-8.
bool IsValidUtf8(std::string_view bytes);

// Replaces every ill-formed subpart (and a truncated tail) with U+FFFD.
std::string SanitizeUtf8(std::string_view bytes);

// Appends the UTF-8 encoding of `cp` (at most U+10FFFF) to `out`. A surrogate (U+D800..U+DFFF,
// not a scalar value) gets its three-byte pattern, which is not well-formed UTF-8: callers that
// must keep a lone surrogate (Python's json does) rely on that.
void AppendUtf8(char32_t cp, std::string* out);

// Number of code points in well-formed UTF-8 (ill-formed subparts count one each).
size_t CountCodePoints(std::string_view text);

// Python's str.isspace() for one code point (Unicode White_Space plus U+001C..U+001F).
bool IsPythonSpace(char32_t cp);

}  // namespace strata::engine
