// Sampling constraints that filter tokens without a grammar (vLLM's SamplingParams):
//   allowed_token_ids  only these ids may be sampled;
//   bad_words          token sequences that may never be completed: a sequence's last token is
//                      banned whenever the tokens generated just before it are the rest of it
//                      (a one-token word is always banned);
// and the combination of several constraints (a grammar and filters): every matcher masks in
// turn. Filters never leave nothing to sample: if one would mask every token the others left,
// its mask is not applied for that step (a grammar's end-of-sequence ids stay reachable).
// Filters do not decide where the output ends, so min_tokens still holds under them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/sampling.h"

namespace strata::engine {

// `ids` non-empty (duplicates allowed); ids ≥ vocab are ignored at sampling time.
std::shared_ptr<const TokenConstraint> AllowedTokensConstraint(std::vector<int32_t> ids);

// `words`: token sequences, each non-empty.
std::shared_ptr<const TokenConstraint> BadWordsConstraint(std::vector<std::vector<int32_t>> words);

// All of `constraints` (nulls skipped): null when none is left, the one when one is. The first
// keeps its role (it may decide where the output ends); the others are filters, applied after
// it and only while they leave a token.
std::shared_ptr<const TokenConstraint> CombineConstraints(
    std::vector<std::shared_ptr<const TokenConstraint>> constraints);

}  // namespace strata::engine
