#include "scheduler/ngram_proposer.h"

#include <algorithm>

#include "core/check.h"

namespace strata::scheduler {
namespace {

// Length of the common suffix of tokens[.., end] and tokens[.., len − 1], at most max_n.
int MatchLength(absl::Span<const int32_t> tokens, int64_t end, int max_n) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  int n = 0;
  while (n < max_n && end - n >= 0 &&
         tokens[static_cast<size_t>(end - n)] == tokens[static_cast<size_t>(len - 1 - n)]) {
    ++n;
  }
  return n;
}

// The text after the occurrence ending at `end`, read on into the draft itself where it reaches
// the end of `tokens` (an overlapping copy, as in LZ77): a loop of period p yields max_draft
// tokens, not p.
int ContinueAfter(absl::Span<const int32_t> tokens, int64_t end, int max_draft,
                  std::vector<int32_t>* draft) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  const int64_t from = end + 1;
  for (int64_t i = 0; i < max_draft; ++i) {
    const int64_t at = from + i;
    const int32_t token =
        at < len ? tokens[static_cast<size_t>(at)] : (*draft)[static_cast<size_t>(at - len)];
    draft->push_back(token);
  }
  return max_draft;
}

}  // namespace

int ProposeNgramDraft(absl::Span<const int32_t> tokens, int min_n, int max_n, int max_draft,
                      std::vector<int32_t>* draft) {
  draft->clear();
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (max_draft <= 0 || min_n < 1 || len < min_n + 1) return 0;
  const int32_t last = tokens[static_cast<size_t>(len - 1)];
  // An occurrence ends at e < len − 1 (so at least one token follows it); scanning e downwards
  // finds the latest occurrence of each length first.
  int64_t best_end = -1;
  int best_n = 0;
  for (int64_t e = len - 2; e >= 0; --e) {
    if (tokens[static_cast<size_t>(e)] != last) continue;
    const int n = MatchLength(tokens, e, max_n);
    if (n > best_n) {
      best_n = n;
      best_end = e;
      if (n == max_n) break;
    }
  }
  if (best_n < min_n) return 0;
  return ContinueAfter(tokens, best_end, max_draft, draft);
}

NgramIndex::NgramIndex(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {
  CHECK(min_n >= 1 && min_n <= max_n) << "min_n " << min_n << ", max_n " << max_n;
}

uint64_t NgramIndex::KeyEndingAt(absl::Span<const int32_t> tokens, int64_t end) const {
  uint64_t key = 0x9e3779b97f4a7c15ull;
  for (int64_t i = end - min_n_ + 1; i <= end; ++i) {
    key = (key ^ static_cast<uint32_t>(tokens[static_cast<size_t>(i)])) * 0xff51afd7ed558ccdull;
    key ^= key >> 29;
  }
  return key;
}

void NgramIndex::Update(absl::Span<const int32_t> tokens) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  CHECK_GE(len, static_cast<int64_t>(previous_.size())) << "tokens only grow";
  for (int64_t e = static_cast<int64_t>(previous_.size()); e <= len - 2; ++e) {
    if (e < min_n_ - 1) {
      previous_.push_back(-1);
      continue;
    }
    auto [it, inserted] = latest_.try_emplace(KeyEndingAt(tokens, e), static_cast<int32_t>(e));
    previous_.push_back(inserted ? -1 : it->second);
    it->second = static_cast<int32_t>(e);
  }
}

int NgramIndex::Propose(absl::Span<const int32_t> tokens, int max_draft,
                        std::vector<int32_t>* draft) {
  draft->clear();
  Update(tokens);
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (max_draft <= 0 || len < min_n_ + 1) return 0;
  auto it = latest_.find(KeyEndingAt(tokens, len - 1));
  if (it == latest_.end()) return 0;
  // Candidates latest first; a hash collision shows as a match shorter than min_n.
  int64_t best_end = -1;
  int best_n = 0;
  int64_t e = it->second;
  for (int seen = 0; e >= 0 && seen < kMaxCandidates; ++seen) {
    const int n = MatchLength(tokens, e, max_n_);
    if (n >= min_n_ && n > best_n) {
      best_n = n;
      best_end = e;
      if (n == max_n_) break;
    }
    e = previous_[static_cast<size_t>(e)];
  }
  if (best_n == 0) return 0;
  return ContinueAfter(tokens, best_end, max_draft, draft);
}

}  // namespace strata::scheduler
