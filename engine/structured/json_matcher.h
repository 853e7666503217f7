// Byte-level matcher of JSON text against a JsonGrammar (json_schema.h): which bytes may come
// next, one byte at a time. The structured-output constraint (json_constraint.h) walks it over
// the vocabulary's bytes to mask the logits of each step.
//
// A state is a set of threads, each a stack of frames (a pushdown automaton per thread); an
// anyOf forks one thread per alternative when the value's first byte arrives; enum values and
// declared keys are one thread each, a range of sorted candidates narrowed by every byte (only
// a literal that is a prefix of another, a number, forks when it completes). Threads that
// cannot take a byte die, identical ones merge. A state is complete when one thread has closed its
// root value (a number at the root is complete once it can end).
//
// What the matcher allows beyond the schema, and its limits:
//   - whitespace (space, tab, CR, LF) between tokens, at most kMaxWhitespaceRun bytes in a row,
//     none after the root value;
//   - strings: well-formed UTF-8 without control bytes, `"` or `\` but in the JSON escapes
//     (\uXXXX with hex digits; surrogates only as a high-low pair, as JSON parsers demand);
//     lengths count code points (an escape is one, so is a surrogate pair); a string with a
//     pattern steps its automaton over the decoded bytes and takes \u escapes only for control
//     characters (\u0000–\u001F; other characters are written as themselves); a byte is taken
//     only if the pattern can still match within maxLength;
//   - numbers with bounds: fixed point (json_schema.h), a digit taken only if some value within
//     the bounds still starts with the text;
//   - numbers at most kMaxNumberBytes bytes, integers at most kMaxIntegerDigits digits (every
//     one fits an int64, as consumers of "integer" expect), nesting at most kMaxDepth frames, at
//     most kMaxThreads live threads (beyond: the later ones are dropped, which can only narrow what
//     is accepted, never widen it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/structured/json_schema.h"

namespace strata::structured {

inline constexpr int kMaxWhitespaceRun = 24;
inline constexpr int kMaxNumberBytes = 24;
inline constexpr int kMaxIntegerDigits = 18;
inline constexpr size_t kMaxDepth = 64;
inline constexpr size_t kMaxThreads = 256;

enum class FrameKind : uint8_t {
  kValue,    // a value of `node` is expected (whitespace may come first)
  kObject,   // inside {…} of `node`
  kKey,      // inside a declared key: keys_sorted[b, end) of `node` match `a` bytes so far
  kArray,    // inside […] of `node`, `a` items so far
  kString,   // inside "…", `a` code points so far (node −1: unbounded)
  kNumber,   // inside a number, `a` bytes so far
  kLiteral,  // literals [b, end) of `node` (kAny: false/null/true) match `a` bytes so far
  kText,     // raw text of a kText root `node`: pattern state `end`, `a` = 1 where it may end
};

struct Frame {
  FrameKind kind = FrameKind::kValue;
  uint8_t sub = 0;  // kind-specific sub-state
  // kString: kKeyString. kNumber: bit 0 after a leading '-'; with bounds (kNumBounded), the
  // fraction digits so far in bits 1–4 and kNumInRange while the text so far is a value
  // within them.
  uint8_t flags = 0;

  int32_t node = -1;
  int32_t a = 0;
  int32_t b = 0;
  // kKey, kLiteral: the candidate range [b, end). kString with a pattern: the pattern state in
  // `end`. kNumber with bounds: the digits so far as one integer, high half in `end`, low in
  // `b`.
  int32_t end = 0;
  bool operator==(const Frame&) const = default;
};

struct MatchThread {
  std::vector<Frame> stack;  // empty once `done`
  int ws_run = 0;            // whitespace bytes just consumed between tokens
  bool done = false;         // the root value is closed
  bool dead = false;         // scratch within Advance
};

class JsonMatchState {
 public:
  // The state before any byte: one thread expecting a root value.
  static JsonMatchState Start(const JsonGrammar& grammar);

  // Writes this state advanced by `byte` into *out (whose storage is reused: no allocation once
  // it has grown). Returns false (and leaves *out empty) when no thread takes the byte.
  bool Advance(const JsonGrammar& grammar, uint8_t byte, JsonMatchState* out) const;
  // The same over several bytes, from this state into *out; `scratch` holds the intermediate
  // state.
  bool AdvanceBytes(const JsonGrammar& grammar, std::string_view bytes, JsonMatchState* out,
                    JsonMatchState* scratch) const;

  // The text so far is a complete value (the end of the output is allowed here).
  bool CanFinish() const;
  bool empty() const { return size_ == 0; }
  size_t num_threads() const { return size_; }
  // When every thread is inside a string, between code points and outside an escape: how many
  // more code points some thread's string may take (kUnbounded without maxLength). Any run of
  // plain bytes (IsPlainStringByte) that is well-formed UTF-8 from state 0 (it may end inside a
  // code point) and starts at most that many code points is accepted from here: the
  // constraint's fast path. −1 otherwise.
  int64_t PlainStringRoom(const JsonGrammar& grammar) const;
  static constexpr int64_t kUnbounded = INT64_MAX;
  // When every thread is inside a string with a pattern but no maxLength, between code points
  // and outside an escape, all in the same pattern state: that pattern and state. A run of plain
  // bytes is then accepted exactly when the pattern's automaton takes it from that state (the
  // constraint caches those tokens per state). False otherwise.
  bool PatternSpot(const JsonGrammar& grammar, int32_t* pattern, int32_t* pattern_state) const;

 private:
  friend class Stepper;
  std::vector<MatchThread> threads_;  // [0, size_) live; the rest keep their capacity
  size_t size_ = 0;
};

// Whether `byte` is a plain string byte (see PlainStringRoom).
inline bool IsPlainStringByte(uint8_t byte) { return byte >= 0x20 && byte != '"' && byte != '\\'; }

// UTF-8 well-formedness (RFC 3629: no overlongs, surrogates or code points above U+10FFFF) as
// a byte automaton. State 0: between code points; otherwise (continuation bytes still due << 4)
// | the allowed range of the next one. Returns the next state, or kUtf8Bad.
inline constexpr uint8_t kUtf8Bad = 0xFF;
uint8_t Utf8Next(uint8_t state, uint8_t byte);

}  // namespace strata::structured
