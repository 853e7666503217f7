// Byte-level BPE training (tiktoken-style vocabularies).
//
// Input text is pre-tokenized with the given pattern (merges never cross piece boundaries),
// identical pieces are counted once with their frequency, then the most frequent adjacent pair
// is merged repeatedly (ties: the pair of lowest ids) until the vocabulary has `num_tokens`
// tokens. Ranks 0..255 are the single bytes in byte order; each merge appends one rank (a merge
// whose bytes already form a token reuses it). Pair counts are updated incrementally, only for
// the pieces a merge touches, so training a few thousand merges on a megabyte takes seconds.
// Deterministic: same input, same vocabulary.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/pretokenizer.h"

namespace strata::engine::demo {

// Returns the tokens in rank order. FailedPrecondition when the text runs out of pairs before
// reaching `num_tokens` (> 256).
absl::StatusOr<std::vector<std::string>> TrainBpe(const std::vector<std::string_view>& texts,
                                                  const engine::PreTokenizer& pretokenizer,
                                                  size_t num_tokens);

}  // namespace strata::engine::demo
