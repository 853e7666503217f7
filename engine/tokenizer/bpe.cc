#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <functional>

#include "core/check.h"

namespace strata::engine {

void BpeEncodePiece(const BpeVocab& vocab, std::string_view piece, std::vector<int32_t>* out) {
  DCHECK(!piece.empty());
  if (piece.size() == 1) {
    out->push_back(static_cast<int32_t>(vocab.ByteRank(static_cast<uint8_t>(piece[0]))));
    return;
  }
  const uint32_t whole = vocab.Rank(piece);
  if (whole != BpeVocab::kNoRank) {
    out->push_back(static_cast<int32_t>(whole));
    return;
  }
  if (piece.size() <= kSmallPieceBytes) {
    BpeMergeSmall(vocab, piece, out);
  } else {
    BpeMergeHeap(vocab, piece, out);
  }
}

void BpeMergeSmall(const BpeVocab& vocab, std::string_view piece, std::vector<int32_t>* out) {
  CHECK_LE(piece.size(), kSmallPieceBytes);
  uint32_t part[kSmallPieceBytes];  // rank of each current part
  uint32_t pair[kSmallPieceBytes];  // rank of part[i] merged with part[i + 1]
  size_t n = piece.size();
  for (size_t i = 0; i < n; ++i) part[i] = vocab.ByteRank(static_cast<uint8_t>(piece[i]));
  for (size_t i = 0; i + 1 < n; ++i) pair[i] = vocab.PairRank(part[i], part[i + 1]);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (pair[i] < pair[best]) best = i;
    }
    if (pair[best] == BpeVocab::kNoRank) break;
    part[best] = pair[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      part[i] = part[i + 1];
      pair[i] = pair[i + 1];
    }
    --n;
    if (best > 0) pair[best - 1] = vocab.PairRank(part[best - 1], part[best]);
    if (best + 1 < n) pair[best] = vocab.PairRank(part[best], part[best + 1]);
  }
  for (size_t i = 0; i < n; ++i) out->push_back(static_cast<int32_t>(part[i]));
}

namespace {

// Per-thread scratch for the heap merge, reused across pieces to avoid allocations.
struct HeapScratch {
  std::vector<uint32_t> part;  // [n] rank of the part starting at byte i (valid if alive)
  std::vector<uint32_t> pair;  // [n] rank of the pair starting at part i, kNoRank if none
  std::vector<uint32_t> next;  // [n] start of the following part, n at the end
  std::vector<uint32_t> prev;  // [n] start of the preceding part, kNone at the start
  std::vector<uint64_t> heap;  // (pair rank << 32 | part start), min-heap
};

constexpr uint32_t kNone = UINT32_MAX;

}  // namespace

void BpeMergeHeap(const BpeVocab& vocab, std::string_view piece, std::vector<int32_t>* out) {
  CHECK_LT(piece.size(), size_t{kNone});
  thread_local HeapScratch s;
  const uint32_t n = static_cast<uint32_t>(piece.size());
  s.part.resize(n);
  s.pair.resize(n);
  s.next.resize(n);
  s.prev.resize(n);
  s.heap.clear();
  for (uint32_t i = 0; i < n; ++i) {
    s.part[i] = vocab.ByteRank(static_cast<uint8_t>(piece[i]));
    s.next[i] = i + 1;
    s.prev[i] = i == 0 ? kNone : i - 1;
  }
  auto push = [&](uint32_t at) {
    const uint32_t right = s.next[at];
    s.pair[at] = right < n ? vocab.PairRank(s.part[at], s.part[right]) : BpeVocab::kNoRank;
    if (s.pair[at] != BpeVocab::kNoRank) {
      s.heap.push_back((uint64_t{s.pair[at]} << 32) | at);
      std::push_heap(s.heap.begin(), s.heap.end(), std::greater<>());
    }
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push(i);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), std::greater<>());
    const uint64_t top = s.heap.back();
    s.heap.pop_back();
    const uint32_t rank = static_cast<uint32_t>(top >> 32);
    const uint32_t at = static_cast<uint32_t>(top);
    // Stale entry: the part at `at` was absorbed (pair reset to kNoRank) or its pair changed.
    // A rank fixes the merged bytes, so an equal rank at the same start is the same merge.
    if (s.pair[at] != rank) continue;
    const uint32_t right = s.next[at];
    s.part[at] = rank;
    s.pair[right] = BpeVocab::kNoRank;
    s.next[at] = s.next[right];
    if (s.next[at] < n) s.prev[s.next[at]] = at;
    push(at);
    if (s.prev[at] != kNone) push(s.prev[at]);
  }
  for (uint32_t i = 0; i < n; i = s.next[i]) out->push_back(static_cast<int32_t>(s.part[i]));
}

}  // namespace strata::engine
