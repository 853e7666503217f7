// Prompt-lookup drafts for speculative decoding (vLLM's "ngram" method, llama.cpp's lookup
// decoding): text that quotes its context (code edits, summaries, extraction, JSON keys) often
// continues the way an earlier occurrence of its last few tokens continued.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace strata::scheduler {

// Finds the earlier occurrence of the longest suffix of `tokens` of length n in [min_n, max_n]
// (the latest one among equally long matches) and writes the `max_draft` tokens that followed
// it into `draft` (cleared first; its capacity is reused), continuing periodically where they
// reach the end of `tokens`. Returns the draft length: max_draft, or 0 when no suffix of at
// least min_n tokens occurred before. A full scan, O(len + matches · max_n) per call (about
// 1 ms per million tokens): the reference NgramIndex is tested against.
int ProposeNgramDraft(absl::Span<const int32_t> tokens, int min_n, int max_n, int max_draft,
                      std::vector<int32_t>* draft);

// The same drafts from an index of one sequence's min_n-grams, kept up to date as its tokens
// grow (they only ever grow): O(tokens appended) to update, O(kMaxCandidates · max_n) to
// propose, whatever the context length. Equal to ProposeNgramDraft whenever the suffix's
// min_n-gram occurred at most kMaxCandidates times before; beyond that only the latest
// kMaxCandidates occurrences are considered. Memory: 4 bytes per token plus a hash map entry
// per distinct min_n-gram.
class NgramIndex {
 public:
  static constexpr int kMaxCandidates = 64;

  NgramIndex(int min_n, int max_n);

  // `tokens` extends the tokens of the previous call (CHECKed by length only).
  int Propose(absl::Span<const int32_t> tokens, int max_draft, std::vector<int32_t>* draft);

 private:
  uint64_t KeyEndingAt(absl::Span<const int32_t> tokens, int64_t end) const;
  // Indexes the ends e ≤ len − 2 (each has a following token) not indexed yet.
  void Update(absl::Span<const int32_t> tokens);

  const int min_n_, max_n_;
  absl::flat_hash_map<uint64_t, int32_t> latest_;  // key of the min_n-gram ending at e → latest e
  std::vector<int32_t> previous_;  // [e]: the previous end with the same key, or −1
};

}  // namespace strata::scheduler
