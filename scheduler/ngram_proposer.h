// Prompt-lookup drafts for speculative decoding (vLLM's "ngram" method, llama.cpp's lookup
// decoding): text that quotes its context (code edits, summaries, extraction, JSON keys) often
// continues the way an earlier occurrence of its last few tokens continued.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace strata::scheduler {

// Finds the earlier occurrence of the longest suffix of `tokens` of length n in [min_n, max_n]
// (the latest one among equally long matches) and writes the `max_draft` tokens that followed
// it into `draft` (cleared first; its capacity is reused), continuing periodically where they
// reach the end of `tokens`. Returns the draft length: max_draft, or 0 when no suffix of at
// least min_n tokens occurred before. O(len + matches · max_n).
int ProposeNgramDraft(absl::Span<const int32_t> tokens, int min_n, int max_n, int max_draft,
                      std::vector<int32_t>* draft);

}  // namespace strata::scheduler
