#include "scheduler/ngram_proposer.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace strata::scheduler {
namespace {

std::vector<int32_t> Draft(const std::vector<int32_t>& tokens, int min_n, int max_n, int k) {
  std::vector<int32_t> draft = {99};  // cleared by the call
  const int n = ProposeNgramDraft(tokens, min_n, max_n, k, &draft);
  EXPECT_EQ(n, static_cast<int>(draft.size()));
  return draft;
}

TEST(NgramProposerTest, ContinuesTheLatestOccurrenceOfTheLongestSuffix) {
  // Suffix "1 2" occurs at 0 (followed by 3 4) and at 5 (followed by 7 8); "9 1 2" only at 4.
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 9, 1, 2, 7, 8, 6, 9, 1, 2};
  EXPECT_EQ(Draft(tokens, 1, 3, 2), (std::vector<int32_t>{7, 8}));  // the 3-gram's occurrence
  EXPECT_EQ(Draft(tokens, 1, 2, 2), (std::vector<int32_t>{7, 8}));  // latest 2-gram
  // Without the 3-gram, "1 2" at 0 and 5: the latest one, at 5.
  const std::vector<int32_t> two = {1, 2, 3, 4, 5, 1, 2, 7, 8, 6, 0, 1, 2};
  EXPECT_EQ(Draft(two, 2, 4, 3), (std::vector<int32_t>{7, 8, 6}));
}

TEST(NgramProposerTest, LongerMatchWinsOverLaterShorterOne) {
  // "5 6 7" at 0 (→ 1), "6 7" alone at 5 (→ 2): the longer context predicts better.
  const std::vector<int32_t> tokens = {5, 6, 7, 1, 0, 6, 7, 2, 3, 5, 6, 7};
  EXPECT_EQ(Draft(tokens, 1, 4, 1), (std::vector<int32_t>{1}));
}

TEST(NgramProposerTest, NothingBelowMinOrWithoutAnEarlierOccurrence) {
  EXPECT_TRUE(Draft({1, 2, 3, 4}, 1, 3, 4).empty());  // 4 never occurred before
  EXPECT_TRUE(Draft({7}, 1, 3, 4).empty());           // one token: nothing before it
  // "3 4" occurs only as a 1-gram ("4" at 1): min 2 refuses it.
  EXPECT_TRUE(Draft({9, 4, 5, 3, 4}, 2, 3, 4).empty());
  EXPECT_EQ(Draft({9, 4, 5, 3, 4}, 1, 3, 2), (std::vector<int32_t>{5, 3}));
  EXPECT_TRUE(Draft({1, 2, 1, 2}, 1, 3, 0).empty());  // max_draft 0
}

TEST(NgramProposerTest, LoopsContinuePeriodicallyPastTheEnd) {
  // Period 2: the latest "a b" occurrence is followed by only 2 tokens before the end; the
  // draft reads on into itself (an overlapping copy) to the requested length.
  EXPECT_EQ(Draft({4, 8, 4, 8, 4, 8}, 2, 3, 5), (std::vector<int32_t>{4, 8, 4, 8, 4}));
  EXPECT_EQ(Draft({3, 3, 3}, 1, 4, 4), (std::vector<int32_t>{3, 3, 3, 3}));
  // Period 3 inside a longer text.
  EXPECT_EQ(Draft({0, 1, 2, 3, 1, 2, 3}, 2, 2, 4), (std::vector<int32_t>{1, 2, 3, 1}));
}

TEST(NgramProposerTest, ReusesTheDraftsCapacity) {
  std::vector<int32_t> draft;
  draft.reserve(64);
  const int32_t* storage = draft.data();
  EXPECT_EQ(ProposeNgramDraft(std::vector<int32_t>{1, 2, 1, 2}, 1, 2, 8, &draft), 8);
  EXPECT_EQ(draft.data(), storage);
}

// The index against the full scan, on sequences growing a token at a time (as a decoding
// sequence's do, in calls after one or several appended tokens), over small vocabularies where
// n-grams repeat constantly: the same drafts whenever the suffix's min_n-gram occurred at most
// kMaxCandidates times before (always here but for the longest 2-token runs).
TEST(NgramProposerTest, IndexProposesWhatTheFullScanProposes) {
  std::mt19937 rng(7);
  int compared = 0, drafted = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int vocab = 2 + trial % 5;
    const int min_n = 1 + trial % 3;
    const int max_n = min_n + trial % 4;
    const int k = 1 + trial % 6;
    std::uniform_int_distribution<int32_t> token(0, vocab - 1);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 3; ++i) tokens.push_back(token(rng));
    NgramIndex index(min_n, max_n);
    std::vector<int32_t> want, got;
    while (tokens.size() < 160) {
      for (int add = 1 + static_cast<int>(rng() % 3); add > 0; --add) {
        tokens.push_back(token(rng));
      }
      const int n_got = index.Propose(tokens, k, &got);
      const int n_want = ProposeNgramDraft(tokens, min_n, max_n, k, &want);
      int occurrences = 0;  // earlier ends of the suffix's min_n-gram
      for (size_t e = static_cast<size_t>(min_n) - 1; e + 1 < tokens.size(); ++e) {
        bool same = true;
        for (int i = 0; i < min_n && same; ++i) {
          same = tokens[e - static_cast<size_t>(i)] == tokens[tokens.size() - 1 - i];
        }
        occurrences += same ? 1 : 0;
      }
      if (occurrences > NgramIndex::kMaxCandidates) continue;
      ++compared;
      drafted += n_want > 0 ? 1 : 0;
      ASSERT_EQ(n_got, n_want) << "trial " << trial << " at " << tokens.size();
      ASSERT_EQ(got, want) << "trial " << trial << " at " << tokens.size();
    }
  }
  EXPECT_GT(compared, 3000);
  EXPECT_GT(drafted, compared / 2);
}

}  // namespace
}  // namespace strata::scheduler
