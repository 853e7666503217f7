#include "engine/structured/thinking_budget.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace strata::structured {
namespace {

// Ids 0-255: bytes; then the markers and a few multi-byte tokens.
constexpr int32_t kClose = 256;
constexpr int32_t kSep = 257;
constexpr int32_t kThink = 258;  // "think"
constexpr int32_t kTh = 259;     // "th"
constexpr int32_t kInk = 260;    // "ink"
constexpr int32_t kThinkEnd = 261;
constexpr int32_t kTools = 262;  // "tools"
constexpr int64_t kVocab = 263;

std::shared_ptr<const TokenVocab> ThinkingVocab() {
  std::vector<std::string> bytes(kVocab);
  for (int b = 0; b < 256; ++b) bytes[b] = std::string(1, static_cast<char>(b));
  bytes[kThink] = "think";
  bytes[kTh] = "th";
  bytes[kInk] = "ink";
  bytes[kTools] = "tools";
  return std::make_shared<TokenVocab>(std::move(bytes));
}

ThinkingEnd K3End() { return {kClose, "think", kSep, {kClose, kThink, kSep}}; }
ThinkingEnd K2End() { return {kThinkEnd, "", -1, {kThinkEnd}}; }

// The ids MaskLogits leaves allowed.
std::vector<int32_t> Allowed(engine::TokenMatcher& m) {
  std::vector<float> logits(kVocab, 0.0f);
  m.MaskLogits(logits.data(), kVocab);
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < kVocab; ++id) {
    if (!std::isinf(logits[id])) ids.push_back(id);
  }
  return ids;
}

void AcceptAll(engine::TokenMatcher& m, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) m.Accept(id);
}

// Records what it is given; forbids the byte 'x' (so its mask is visible).
class Recorder : public engine::TokenConstraint {
 public:
  class Matcher : public engine::TokenMatcher {
   public:
    explicit Matcher(std::vector<int32_t>* seen) : seen_(seen) {}
    void MaskLogits(float* logits, int64_t) override {
      logits['x'] = -std::numeric_limits<float>::infinity();
    }
    void Accept(int32_t token) override { seen_->push_back(token); }

   private:
    std::vector<int32_t>* seen_;
  };
  std::unique_ptr<engine::TokenMatcher> NewMatcher() const override {
    return std::make_unique<Matcher>(&seen);
  }
  mutable std::vector<int32_t> seen;
};

TEST(ThinkingBudgetTest, K3ForcesTheCloseOfTheThinkChannelAtTheBudgetThenLetsEverythingBy) {
  ThinkingBudget budget(nullptr, K3End(), 3, ThinkingVocab());
  auto m = budget.NewMatcher();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Allowed(*m).size(), static_cast<size_t>(kVocab)) << i;
    m->Accept('a');
  }
  for (int32_t forced : {kClose, kThink, kSep}) {
    ASSERT_EQ(Allowed(*m), std::vector<int32_t>{forced});
    m->Accept(forced);
  }
  EXPECT_EQ(Allowed(*m).size(), static_cast<size_t>(kVocab));
  AcceptAll(*m, {'b', 'c', 'd', 'e'});
  EXPECT_EQ(Allowed(*m).size(), static_cast<size_t>(kVocab));
  EXPECT_FALSE(budget.DecidesEnd());
}

TEST(ThinkingBudgetTest, TheModelsOwnCloseInAnySpellingEndsTheCap) {
  ThinkingBudget budget(nullptr, K3End(), 4, ThinkingVocab());
  auto m = budget.NewMatcher();
  AcceptAll(*m, {'a', kClose, kTh, kInk, kSep});  // "think" as two tokens
  AcceptAll(*m, {'b', 'c', 'd', 'e', 'f', 'g'});
  EXPECT_EQ(Allowed(*m).size(), static_cast<size_t>(kVocab));
}

TEST(ThinkingBudgetTest, OtherElementsInsideTheReasoningAreReasoning) {
  ThinkingBudget budget(nullptr, K3End(), 5, ThinkingVocab());
  auto m = budget.NewMatcher();
  // A tools channel inside the reasoning (`C tools S`), and a close spelling "thin" + "k..."
  // wrongly: neither ends it.
  AcceptAll(*m, {kClose, kTools, kSep, kClose, kTh, 'x', kSep});
  EXPECT_EQ(Allowed(*m), std::vector<int32_t>{kClose});
}

TEST(ThinkingBudgetTest, ABudgetReachedInsideAnElementWaitsForItsSeparator) {
  ThinkingBudget budget(nullptr, K3End(), 2, ThinkingVocab());
  auto m = budget.NewMatcher();
  AcceptAll(*m, {'a', kClose});  // the budget is reached with a <|close|> just written
  EXPECT_EQ(Allowed(*m).size(), static_cast<size_t>(kVocab));
  m->Accept(kTools);
  EXPECT_EQ(Allowed(*m).size(), static_cast<size_t>(kVocab));
  m->Accept(kSep);  // `C tools S`: still reasoning, and now the close is forced
  EXPECT_EQ(Allowed(*m), std::vector<int32_t>{kClose});
}

TEST(ThinkingBudgetTest, AnElementThatNeverEndsStopsHoldingTheBudgetBack) {
  ThinkingBudget budget(nullptr, K3End(), 1, ThinkingVocab());
  auto m = budget.NewMatcher();
  m->Accept(kClose);
  for (int i = 0; i < 64; ++i) m->Accept('z');
  EXPECT_EQ(Allowed(*m).size(), static_cast<size_t>(kVocab));
  m->Accept('z');  // more than 64 bytes after <|close|>: not a marker any more
  EXPECT_EQ(Allowed(*m), std::vector<int32_t>{kClose});
}

TEST(ThinkingBudgetTest, ABudgetOfZeroForcesTheWholeCloseFromTheFirstToken) {
  ThinkingBudget budget(nullptr, K3End(), 0, ThinkingVocab());
  auto m = budget.NewMatcher();
  for (int32_t forced : {kClose, kThink, kSep}) {
    ASSERT_EQ(Allowed(*m), std::vector<int32_t>{forced});
    m->Accept(forced);
  }
  EXPECT_EQ(Allowed(*m).size(), static_cast<size_t>(kVocab));
}

TEST(ThinkingBudgetTest, K2ClosesWithOneTokenAndABudgetOfZeroClosesAtOnce) {
  ThinkingBudget budget(nullptr, K2End(), 0, ThinkingVocab());
  auto m = budget.NewMatcher();
  EXPECT_EQ(Allowed(*m), std::vector<int32_t>{kThinkEnd});
  m->Accept(kThinkEnd);
  EXPECT_EQ(Allowed(*m).size(), static_cast<size_t>(kVocab));

  ThinkingBudget natural(nullptr, K2End(), 2, ThinkingVocab());
  auto n = natural.NewMatcher();
  AcceptAll(*n, {'a', kThinkEnd, 'b', 'c', 'd'});
  EXPECT_EQ(Allowed(*n).size(), static_cast<size_t>(kVocab));
}

TEST(ThinkingBudgetTest, TheInnerConstraintSeesEveryTokenAndMasksWhenNotForced) {
  auto inner = std::make_shared<Recorder>();
  ThinkingBudget budget(inner, K3End(), 1, ThinkingVocab());
  EXPECT_TRUE(budget.DecidesEnd());
  auto m = budget.NewMatcher();
  std::vector<int32_t> allowed = Allowed(*m);
  EXPECT_EQ(allowed.size(), static_cast<size_t>(kVocab - 1));  // the inner mask: no 'x'
  m->Accept('a');
  AcceptAll(*m, {kClose, kThink, kSep});
  allowed = Allowed(*m);
  EXPECT_EQ(allowed.size(), static_cast<size_t>(kVocab - 1));
  m->Accept('b');
  EXPECT_EQ(inner->seen, (std::vector<int32_t>{'a', kClose, kThink, kSep, 'b'}));
}

}  // namespace
}  // namespace strata::structured
