// Masks as bit sets over token ids (bit id % 64 of word id / 64), shared by the constraints:
// applying one to logits, offering the end ids, and the matcher base class that computes a
// step's mask ahead (Prepare) and applies it (MaskLogits).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/sampling.h"

namespace strata::structured {

// Sets logits[id] = −inf for every id in [0, vocab) whose bit in `allowed` is clear (missing
// words: not allowed).
void MaskLogitsOutside(const std::vector<uint64_t>& allowed, float* logits, int64_t vocab);

// Sets the bits of `end_ids` (those in [0, vocab)) when the output may end here (`complete`) or
// when no other token is left (a dead end — the grammar's bounds, or a refused token — ends the
// output rather than leaving nothing to draw).
void AllowEndIds(const std::vector<int32_t>& end_ids, bool complete, int64_t vocab,
                 std::vector<uint64_t>* bits);

inline bool IsEndId(const std::vector<int32_t>& end_ids, int32_t token) {
  return std::find(end_ids.begin(), end_ids.end(), token) != end_ids.end();
}

// A matcher whose step mask is the bit set AllowedTokens computes: Prepare computes it ahead
// (the CPU executor prepares rows in parallel), MaskLogits applies it (computing it first when
// it was not prepared for this vocab), Accept moves on (Advance).
class BitMaskMatcher : public engine::TokenMatcher {
 public:
  void Prepare(int64_t vocab) final;
  void MaskLogits(float* logits, int64_t vocab) final;
  void Accept(int32_t token) final;

  // The ids allowed next as a bit set over [0, vocab).
  virtual void AllowedTokens(int64_t vocab, std::vector<uint64_t>* bits) = 0;

 protected:
  virtual void Advance(int32_t token) = 0;

 private:
  std::vector<uint64_t> bits_;
  int64_t prepared_vocab_ = -1;  // bits_ hold the mask of the next draw over this vocab
};

}  // namespace strata::structured
