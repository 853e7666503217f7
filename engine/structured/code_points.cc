// code_points.h: class complements and the split of code point ranges into UTF-8 byte ranges.
#include "engine/structured/code_points.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/check.h"
#include "engine/tokenizer/utf8.h"

namespace strata::structured {

CpSet Normalize(CpSet s) {
  std::sort(s.begin(), s.end(), [](CpRange x, CpRange y) { return x.lo < y.lo; });
  CpSet out;
  for (const CpRange& r : s) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CpSet Complement(const CpSet& set) {
  CpSet out;
  uint32_t next = 0;
  for (const CpRange& r : Normalize(set)) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

namespace {

// The code points [lo, hi] (same encoded length, no surrogates) as sequences of byte ranges:
// split until every position but the first spans whole continuation ranges or lo and hi share
// the bytes before it.
void SplitUtf8(uint32_t lo, uint32_t hi, std::vector<ByteSeq>* out) {
  for (int i = 1; i < 4; ++i) {
    const uint32_t tail = (uint32_t{1} << (6 * i)) - 1;  // the bits of the last i bytes
    if ((lo & ~tail) == (hi & ~tail)) continue;
    if ((lo & tail) != 0) {
      SplitUtf8(lo, lo | tail, out);
      SplitUtf8((lo | tail) + 1, hi, out);
      return;
    }
    if ((hi & tail) != tail) {
      SplitUtf8(lo, (hi & ~tail) - 1, out);
      SplitUtf8(hi & ~tail, hi, out);
      return;
    }
  }
  std::string a, b;
  engine::AppendUtf8(lo, &a);
  engine::AppendUtf8(hi, &b);
  CHECK_EQ(a.size(), b.size());
  ByteSeq seq(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    seq[i] = {static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])};
  }
  out->push_back(std::move(seq));
}

}  // namespace

std::vector<ByteSeq> Utf8Sequences(const CpSet& set) {
  std::vector<ByteSeq> out;
  const uint32_t length_ends[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  for (const CpRange& r : set) {
    uint32_t lo = r.lo;
    for (uint32_t end : length_ends) {
      if (lo > r.hi) break;
      if (lo > end) continue;
      const uint32_t hi = std::min(r.hi, end);
      // Surrogates are not code points UTF-8 may encode.
      if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800) SplitUtf8(lo, 0xD7FF, &out);
        if (hi > 0xDFFF) SplitUtf8(0xE000, hi, &out);
      } else {
        SplitUtf8(lo, hi, &out);
      }
      lo = hi + 1;
    }
  }
  return out;
}

}  // namespace strata::structured
