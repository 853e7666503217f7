#include "engine/tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>

#include "engine/tokenizer/bpe_vocab.h"

namespace strata::engine {
namespace {

std::vector<std::string> ByteTokens() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  return tokens;
}

// Ranks: bytes 0..255, then "ab" 256, "bc" 257, "abc" 258, "aa" 259, "aaaa" 260, "xyz" 261.
std::shared_ptr<const BpeVocab> HandVocab() {
  std::vector<std::string> tokens = ByteTokens();
  for (const char* t : {"ab", "bc", "abc", "aa", "aaaa", "xyz"}) tokens.emplace_back(t);
  return *BpeVocab::FromTokens(tokens);
}

std::vector<int32_t> Encode(const BpeVocab& vocab, std::string_view piece) {
  std::vector<int32_t> out;
  BpeEncodePiece(vocab, piece, &out);
  return out;
}

TEST(BpeTest, MergesLowestRankFirst) {
  auto vocab = HandVocab();
  // ab(256) < bc(257): "abcd" -> ab,c,d -> abc,d.
  EXPECT_EQ(Encode(*vocab, "abcd"), (std::vector<int32_t>{258, 'd'}));
  EXPECT_EQ(Encode(*vocab, "zbc"), (std::vector<int32_t>{'z', 257}));
}

TEST(BpeTest, TiesMergeLeftmostPair) {
  auto vocab = HandVocab();
  EXPECT_EQ(Encode(*vocab, "aaa"), (std::vector<int32_t>{259, 'a'}));
  // aa at 0, then aa at 2, then aa+aa -> aaaa.
  EXPECT_EQ(Encode(*vocab, "aaaaa"), (std::vector<int32_t>{260, 'a'}));
}

TEST(BpeTest, WholePieceTokenWinsOverMerging) {
  auto vocab = HandVocab();
  // "xyz" is a token although neither "xy" nor "yz" is: tiktoken looks the piece up first.
  EXPECT_EQ(Encode(*vocab, "xyz"), (std::vector<int32_t>{261}));
  std::vector<int32_t> merged;
  BpeMergeSmall(*vocab, "xyz", &merged);
  EXPECT_EQ(merged, (std::vector<int32_t>{'x', 'y', 'z'}));
}

TEST(BpeVocabTest, PairRankIsTheRankOfTheConcatenation) {
  auto vocab = HandVocab();
  EXPECT_EQ(vocab->PairRank('a', 'b'), 256u);
  EXPECT_EQ(vocab->PairRank(256, 'c'), 258u);
  EXPECT_EQ(vocab->PairRank('a', 257), 258u);
  EXPECT_EQ(vocab->PairRank('x', 'y'), BpeVocab::kNoRank);
}

TEST(BpeVocabTest, TiktokenTextRoundTrips) {
  auto vocab = HandVocab();
  std::string text = vocab->ToTiktoken();
  EXPECT_EQ(text.substr(0, 7), "AA== 0\n");
  auto again = BpeVocab::FromTiktoken(text);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->Rank("abc"), 258u);
  EXPECT_EQ((*again)->ToTiktoken(), text);
}

TEST(BpeVocabTest, RejectsMalformedFiles) {
  std::string good = HandVocab()->ToTiktoken();
  EXPECT_FALSE(BpeVocab::FromTiktoken(good + "YWI= 999\n").ok());    // "ab" again
  EXPECT_FALSE(BpeVocab::FromTiktoken(good + "eHl6eg== 5\n").ok());  // rank 5 again
  auto bad_b64 = BpeVocab::FromTiktoken(good + "!!!! 1000\n");
  ASSERT_FALSE(bad_b64.ok());
  EXPECT_NE(bad_b64.status().message().find("line 263"), std::string_view::npos)
      << bad_b64.status();
  // Without byte 0x00 the vocabulary cannot encode arbitrary input.
  auto missing = BpeVocab::FromTiktoken(good.substr(good.find('\n') + 1));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("single-byte"), std::string_view::npos);
}

// Reference: tiktoken's algorithm on byte strings (no pair table, no heap).
std::vector<int32_t> NaiveBpe(const BpeVocab& vocab, std::string_view piece) {
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    uint32_t best_rank = BpeVocab::kNoRank;
    size_t best = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      uint32_t r = vocab.Rank(parts[i] + parts[i + 1]);
      if (r < best_rank) {
        best_rank = r;
        best = i;
      }
    }
    if (best_rank == BpeVocab::kNoRank) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + static_cast<long>(best) + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& p : parts) ids.push_back(static_cast<int32_t>(vocab.Rank(p)));
  return ids;
}

// A vocabulary learnt greedily from random text over a small alphabet, so merges chain deeply.
std::shared_ptr<const BpeVocab> LearntVocab(std::mt19937* rng) {
  std::vector<std::string> tokens = ByteTokens();
  std::uniform_int_distribution<int> letter(0, 3);
  std::string corpus;
  for (int i = 0; i < 4000; ++i) corpus.push_back(static_cast<char>('a' + letter(*rng)));
  std::vector<std::string> parts;
  for (char c : corpus) parts.emplace_back(1, c);
  for (int merge = 0; merge < 300 && parts.size() > 1; ++merge) {
    std::map<std::pair<std::string, std::string>, int> counts;
    for (size_t i = 0; i + 1 < parts.size(); ++i) ++counts[{parts[i], parts[i + 1]}];
    auto best = counts.begin();
    for (auto it = counts.begin(); it != counts.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    std::string merged = best->first.first + best->first.second;
    tokens.push_back(merged);
    std::vector<std::string> next;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i + 1 < parts.size() && parts[i] == best->first.first &&
          parts[i + 1] == best->first.second) {
        next.push_back(merged);
        ++i;
      } else {
        next.push_back(parts[i]);
      }
    }
    parts = std::move(next);
  }
  return *BpeVocab::FromTokens(tokens);
}

TEST(BpeTest, SmallAndHeapMergesEqualNaiveReference) {
  std::mt19937 rng(1234);
  auto vocab = LearntVocab(&rng);
  std::uniform_int_distribution<int> letter(0, 4);  // 'e' never merges
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t len = 1 + trial % 300;
    std::string piece;
    for (size_t i = 0; i < len; ++i) piece.push_back(static_cast<char>('a' + letter(rng)));
    const std::vector<int32_t> expected = NaiveBpe(*vocab, piece);
    std::vector<int32_t> heap;
    BpeMergeHeap(*vocab, piece, &heap);
    ASSERT_EQ(heap, expected) << piece;
    if (len <= kSmallPieceBytes) {
      std::vector<int32_t> small;
      BpeMergeSmall(*vocab, piece, &small);
      ASSERT_EQ(small, expected) << piece;
    }
  }
}

TEST(BpeTest, MegabytePieceMergesInNearLinearTime) {
  std::mt19937 rng(99);
  auto vocab = LearntVocab(&rng);
  std::string piece;
  std::uniform_int_distribution<int> letter(0, 3);
  for (int i = 0; i < (1 << 20); ++i) piece.push_back(static_cast<char>('a' + letter(rng)));
  const auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> ids;
  BpeEncodePiece(*vocab, piece, &ids);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string decoded;
  for (int32_t id : ids) decoded += vocab->TokenBytes(static_cast<uint32_t>(id));
  EXPECT_EQ(decoded, piece);
  EXPECT_LT(ids.size(), piece.size() / 2);
  // Quadratic merging would take minutes; n log n takes well under a second.
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace strata::engine
