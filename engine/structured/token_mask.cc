// token_mask.h
#include "engine/structured/token_mask.h"

#include <limits>

namespace strata::structured {

void AllowEndIds(const std::vector<int32_t>& end_ids, bool complete, int64_t vocab,
                 std::vector<uint64_t>* bits) {
  const bool any = std::any_of(bits->begin(), bits->end(), [](uint64_t w) { return w != 0; });
  if (!complete && any) return;
  for (int32_t id : end_ids) {
    if (id >= 0 && id < vocab) (*bits)[static_cast<size_t>(id / 64)] |= uint64_t{1} << (id % 64);
  }
}

void MaskLogitsOutside(const std::vector<uint64_t>& allowed, float* logits, int64_t vocab) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int64_t w = 0; w * 64 < vocab; ++w) {
    const uint64_t word =
        static_cast<size_t>(w) < allowed.size() ? allowed[static_cast<size_t>(w)] : 0;
    if (word == ~uint64_t{0}) continue;
    const int64_t end = std::min(vocab, (w + 1) * 64);
    for (int64_t id = w * 64; id < end; ++id) {
      if ((word >> (id % 64) & 1) == 0) logits[id] = kMasked;
    }
  }
}

void BitMaskMatcher::Prepare(int64_t vocab) {
  AllowedTokens(vocab, &bits_);
  prepared_vocab_ = vocab;
}

void BitMaskMatcher::MaskLogits(float* logits, int64_t vocab) {
  if (prepared_vocab_ != vocab) AllowedTokens(vocab, &bits_);
  prepared_vocab_ = -1;
  MaskLogitsOutside(bits_, logits, vocab);
}

void BitMaskMatcher::Accept(int32_t token) {
  prepared_vocab_ = -1;
  Advance(token);
}

}  // namespace strata::structured
