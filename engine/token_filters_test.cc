// Token filters (allowed_token_ids, bad_words) and their combination with other constraints,
// alone and through the Sampler.
#include "engine/token_filters.h"

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace strata::engine {
namespace {

constexpr int64_t kVocab = 50;
const float kInf = std::numeric_limits<float>::infinity();

std::vector<float> Flat() { return std::vector<float>(kVocab, 0.5f); }

std::set<int32_t> Finite(const std::vector<float>& logits) {
  std::set<int32_t> ids;
  for (int64_t i = 0; i < kVocab; ++i) {
    if (std::isfinite(logits[i])) ids.insert(static_cast<int32_t>(i));
  }
  return ids;
}

// Allows only ids ≡ 1 (mod 3), and decides where the output ends (like a grammar).
class OneModThree : public TokenConstraint {
 public:
  std::unique_ptr<TokenMatcher> NewMatcher() const override {
    struct M : TokenMatcher {
      void MaskLogits(float* logits, int64_t vocab) override {
        for (int64_t i = 0; i < vocab; ++i) {
          if (i % 3 != 1) logits[i] = -kInf;
        }
      }
      void Accept(int32_t) override {}
    };
    return std::make_unique<M>();
  }
};

TEST(TokenFiltersTest, AllowedTokensLeaveOnlyThoseIds) {
  auto c = AllowedTokensConstraint({7, 3, 3, 49, 60});  // 60 ≥ vocab: ignored
  EXPECT_FALSE(c->DecidesEnd());
  auto m = c->NewMatcher();
  std::vector<float> logits = Flat();
  m->MaskLogits(logits.data(), kVocab);
  EXPECT_EQ(Finite(logits), (std::set<int32_t>{3, 7, 49}));
  EXPECT_EQ(logits[7], 0.5f);
  // Another constraint already masked all of them: the filter leaves the rest alone.
  logits = Flat();
  for (int32_t id : {3, 7, 49}) logits[id] = -kInf;
  m->MaskLogits(logits.data(), kVocab);
  EXPECT_EQ(Finite(logits).size(), static_cast<size_t>(kVocab - 3));
}

TEST(TokenFiltersTest, BadWordsBanTheLastTokenAfterTheRestOfTheWord) {
  auto c = BadWordsConstraint({{5}, {10, 11, 12}, {20, 21}});
  auto m = c->NewMatcher();
  auto banned = [&] {
    std::vector<float> logits = Flat();
    m->MaskLogits(logits.data(), kVocab);
    std::set<int32_t> out;
    for (int64_t i = 0; i < kVocab; ++i) {
      if (!std::isfinite(logits[i])) out.insert(static_cast<int32_t>(i));
    }
    return out;
  };
  EXPECT_EQ(banned(), (std::set<int32_t>{5}));  // a one-token word: always
  m->Accept(10);
  EXPECT_EQ(banned(), (std::set<int32_t>{5}));
  m->Accept(11);
  EXPECT_EQ(banned(), (std::set<int32_t>{5, 12}));
  m->Accept(20);
  EXPECT_EQ(banned(), (std::set<int32_t>{5, 21}));  // 10 11 20: the long word is broken
  m->Accept(10);
  m->Accept(11);
  EXPECT_EQ(banned(), (std::set<int32_t>{5, 12}));
  // Banning would leave nothing: not applied.
  std::vector<float> logits(kVocab, -kInf);
  logits[12] = 1.0f;
  m->MaskLogits(logits.data(), kVocab);
  EXPECT_EQ(logits[12], 1.0f);
}

TEST(TokenFiltersTest, CombinationMasksWithEveryPartAndKeepsTheFirstsRole) {
  EXPECT_EQ(CombineConstraints({nullptr, nullptr}), nullptr);
  auto allowed = AllowedTokensConstraint({1, 2, 4});
  EXPECT_EQ(CombineConstraints({nullptr, allowed}), allowed);
  auto grammar = std::make_shared<OneModThree>();
  auto both = CombineConstraints({grammar, allowed, BadWordsConstraint({{4}})});
  EXPECT_TRUE(both->DecidesEnd());
  EXPECT_FALSE(CombineConstraints({allowed, BadWordsConstraint({{4}})})->DecidesEnd());
  auto m = both->NewMatcher();
  std::vector<float> logits = Flat();
  m->MaskLogits(logits.data(), kVocab);
  // 1 mod 3 ∩ {1, 2, 4} \ {4} = {1}; banning 1 too would leave nothing.
  EXPECT_EQ(Finite(logits), (std::set<int32_t>{1}));
  auto all_banned = CombineConstraints({grammar, AllowedTokensConstraint({1})});
  m = CombineConstraints({all_banned, BadWordsConstraint({{1}})})->NewMatcher();
  logits = Flat();
  m->MaskLogits(logits.data(), kVocab);
  EXPECT_EQ(Finite(logits), (std::set<int32_t>{1}));
}

TEST(TokenFiltersTest, TheSamplerDrawsOnlyAllowedTokensAndKeepsMinTokensUnderFilters) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.constraint =
      CombineConstraints({AllowedTokensConstraint({2, 3, 9}), BadWordsConstraint({{3}})});
  p.min_tokens = 3;
  p.min_tokens_stop_ids = {9};  // the "EOS": not before 3 tokens under a filter
  Sampler sampler(p, 7, {1, 2});
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> noise(-3.0f, 3.0f);
  std::vector<int32_t> drawn;
  for (int step = 0; step < 200; ++step) {
    std::vector<float> logits(kVocab);
    for (float& x : logits) x = noise(rng);
    logits[9] += 4.0f;  // the stop id is the likeliest
    drawn.push_back(sampler.Sample(logits.data(), kVocab));
  }
  for (size_t i = 0; i < drawn.size(); ++i) {
    EXPECT_TRUE(drawn[i] == 2 || drawn[i] == 9) << "draw " << i << ": " << drawn[i];
  }
  EXPECT_EQ(drawn[0], 2);
  EXPECT_EQ(drawn[1], 2);
  EXPECT_EQ(drawn[2], 2);
  EXPECT_GT(std::count(drawn.begin(), drawn.end(), 9), 100);  // allowed once 3 were drawn
}

}  // namespace
}  // namespace strata::engine
