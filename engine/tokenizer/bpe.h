// Byte-pair merging of one pre-tokenized piece into ranks (tiktoken semantics).
//
// Repeatedly merges the adjacent pair whose merged token has the lowest rank, the leftmost such
// pair on ties, until no adjacent pair is a token. Pieces of up to kSmallPieceBytes bytes use a
// scan over a fixed-size array (at most 32^2 steps, cache-resident); longer pieces use a binary
// heap of candidate pairs over a linked list of parts with lazy invalidation: O(n log n) for an
// n-byte piece, so a 1 MB "word" costs about as much as 1 MB of ordinary text.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/tokenizer/bpe_vocab.h"

namespace strata::engine {

inline constexpr size_t kSmallPieceBytes = 32;

// Appends the ranks (= token ids) of `piece` (non-empty) to `out`. Checks the whole piece first, as
// tiktoken does (a whole-piece token wins even where merging would produce something else).
void BpeEncodePiece(const BpeVocab& vocab, std::string_view piece, std::vector<int32_t>* out);

// The two merge strategies, exposed for tests and the benchmark; both give identical output.
void BpeMergeSmall(const BpeVocab& vocab, std::string_view piece, std::vector<int32_t>* out);
void BpeMergeHeap(const BpeVocab& vocab, std::string_view piece, std::vector<int32_t>* out);

}  // namespace strata::engine
