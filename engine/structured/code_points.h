// Sets of Unicode code points and their UTF-8 encodings as byte ranges: what the regex and
// grammar compilers (regex.h, gbnf.h) turn a character class into, so that their automata step
// over bytes and accept only well-formed UTF-8.
#pragma once

#include <cstdint>
#include <vector>

namespace strata::structured {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CpRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
};
using CpSet = std::vector<CpRange>;  // sorted, disjoint (after Normalize)

// Sorted by lo, overlapping and adjacent ranges merged.
CpSet Normalize(CpSet s);
// Every code point in [0, kMaxCodePoint] not in `set`.
CpSet Complement(const CpSet& set);

struct ByteRange {
  uint8_t lo = 0;
  uint8_t hi = 0;
};
using ByteSeq = std::vector<ByteRange>;

// The UTF-8 encodings of the code points in `set` (normalized; surrogates left out: UTF-8 cannot
// encode them) as sequences of byte ranges: a byte string encodes a member exactly when it matches
// one of the sequences (position by position), and no two sequences match the same string.
std::vector<ByteSeq> Utf8Sequences(const CpSet& set);

}  // namespace strata::structured
