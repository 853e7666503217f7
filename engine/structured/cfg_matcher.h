// Where a text stands in a GBNF grammar (gbnf.h), stepped one byte at a time: the set of parse
// stacks still alive (the approach of llama.cpp's grammar sampler, here over bytes). A stack
// holds element positions, bottom to top: the top is the byte range the next byte must fall in,
// the ones below are where to continue when the rule above them finishes. Rules at the top are
// expanded into their alternatives at once (the grammar has no left recursion, so this ends),
// so a state is exactly the set of byte ranges that may come next; the empty stack means the
// text may end here.
//
// Bounds (a state past them keeps what fits, so generation goes on within them): stacks deeper
// than kMaxCfgStackDepth (rules nested that deep in the text) are dropped, a state keeps at most
// kMaxCfgStacks stacks (ambiguous grammars: the first in canonical order), one byte expands at
// most kMaxCfgExpansions rule alternatives.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/structured/gbnf.h"

namespace strata::structured {

inline constexpr int32_t kMaxCfgStackDepth = 1024;
inline constexpr size_t kMaxCfgStacks = 256;
inline constexpr int64_t kMaxCfgExpansions = int64_t{1} << 16;

class CfgMatchState {
 public:
  // Before the first byte: the alternatives of `root`, expanded.
  static CfgMatchState Start(const CfgGrammar& g);

  // The state after `byte` into *next; false (and *next without stacks) when no stack takes
  // it. *next must not be this.
  bool Advance(const CfgGrammar& g, uint8_t byte, CfgMatchState* next) const;
  // The state after all of `bytes` into *out (*scratch: a buffer); false when some byte is
  // refused.
  bool AdvanceBytes(const CfgGrammar& g, std::string_view bytes, CfgMatchState* out,
                    CfgMatchState* scratch) const;

  // The text so far is a whole `root`.
  bool CanFinish() const { return can_finish_; }
  // Equal states have equal keys (stacks sorted, no repeats): a cache key for per-state masks.
  const std::vector<int32_t>& key() const { return data_; }

 private:
  // The stacks one after another, each as its depth then its positions bottom to top.
  std::vector<int32_t> data_;
  bool can_finish_ = false;
};

}  // namespace strata::structured
