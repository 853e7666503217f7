#include "scheduler/ngram_proposer.h"

#include <algorithm>

namespace strata::scheduler {

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
    int n = 1;
    while (n < max_n && e - n >= 0 &&
           tokens[static_cast<size_t>(e - n)] == tokens[static_cast<size_t>(len - 1 - n)]) {
      ++n;
    }
    if (n > best_n) {
      best_n = n;
      best_end = e;
      if (n == max_n) break;
    }
  }
  if (best_n < min_n) return 0;
  // The text after the occurrence, read on into the draft itself where it reaches the end
  // (an overlapping copy, as in LZ77): a loop of period p yields max_draft tokens, not p.
  const int64_t from = best_end + 1;
  for (int64_t i = 0; i < max_draft; ++i) {
    const int64_t at = from + i;
    const int32_t token =
        at < len ? tokens[static_cast<size_t>(at)] : (*draft)[static_cast<size_t>(at - len)];
    draft->push_back(token);
  }
  return max_draft;
}

}  // namespace strata::scheduler
