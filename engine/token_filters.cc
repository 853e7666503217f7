#include "engine/token_filters.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/check.h"

namespace strata::engine {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// Whether some id in [0, vocab) outside the sorted `banned` still has a finite logit.
bool AnyLeftBesides(const float* logits, int64_t vocab, const std::vector<int32_t>& banned) {
  for (int64_t id = 0; id < vocab; ++id) {
    if (std::isfinite(logits[id]) &&
        !std::binary_search(banned.begin(), banned.end(), static_cast<int32_t>(id))) {
      return true;
    }
  }
  return false;
}

class AllowedMatcher : public TokenMatcher {
 public:
  explicit AllowedMatcher(const std::vector<int32_t>* ids) : ids_(ids) {}
  void MaskLogits(float* logits, int64_t vocab) override {
    saved_.clear();
    for (int32_t id : *ids_) {
      if (id < vocab && std::isfinite(logits[id])) saved_.emplace_back(id, logits[id]);
    }
    if (saved_.empty()) return;  // would leave nothing (another constraint masked them all)
    std::fill(logits, logits + vocab, kMasked);
    for (const auto& [id, logit] : saved_) logits[id] = logit;
  }
  void Accept(int32_t) override {}

 private:
  const std::vector<int32_t>* ids_;
  std::vector<std::pair<int32_t, float>> saved_;
};

class AllowedTokens : public TokenConstraint {
 public:
  explicit AllowedTokens(std::vector<int32_t> ids) : ids_(std::move(ids)) {
    std::sort(ids_.begin(), ids_.end());
    ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
    CHECK(!ids_.empty()) << "allowed_token_ids is empty";
  }
  std::unique_ptr<TokenMatcher> NewMatcher() const override {
    return std::make_unique<AllowedMatcher>(&ids_);
  }
  bool DecidesEnd() const override { return false; }

 private:
  std::vector<int32_t> ids_;
};

class BadWordsMatcher : public TokenMatcher {
 public:
  explicit BadWordsMatcher(const std::vector<std::vector<int32_t>>* words, size_t history)
      : words_(words), history_(history) {}
  void MaskLogits(float* logits, int64_t vocab) override {
    banned_.clear();
    for (const std::vector<int32_t>& word : *words_) {
      const size_t prefix = word.size() - 1;
      if (prefix > recent_.size()) continue;
      if (std::equal(word.begin(), word.end() - 1, recent_.end() - static_cast<long>(prefix))) {
        if (word.back() < vocab) banned_.push_back(word.back());
      }
    }
    if (banned_.empty()) return;
    std::sort(banned_.begin(), banned_.end());
    if (!AnyLeftBesides(logits, vocab, banned_)) return;  // would leave nothing
    for (int32_t id : banned_) logits[id] = kMasked;
  }
  void Accept(int32_t token) override {
    if (history_ == 0) return;
    if (recent_.size() == history_) recent_.erase(recent_.begin());
    recent_.push_back(token);
  }

 private:
  const std::vector<std::vector<int32_t>>* words_;
  const size_t history_;         // the longest word's length − 1: what a match can look back at
  std::vector<int32_t> recent_;  // the last `history_` generated tokens, oldest first
  std::vector<int32_t> banned_;
};

class BadWords : public TokenConstraint {
 public:
  explicit BadWords(std::vector<std::vector<int32_t>> words) : words_(std::move(words)) {
    for (const auto& w : words_) {
      CHECK(!w.empty()) << "an empty bad word";
      history_ = std::max(history_, w.size() - 1);
    }
  }
  std::unique_ptr<TokenMatcher> NewMatcher() const override {
    return std::make_unique<BadWordsMatcher>(&words_, history_);
  }
  bool DecidesEnd() const override { return false; }

 private:
  std::vector<std::vector<int32_t>> words_;
  size_t history_ = 0;
};

class AllOfMatcher : public TokenMatcher {
 public:
  explicit AllOfMatcher(std::vector<std::unique_ptr<TokenMatcher>> matchers)
      : matchers_(std::move(matchers)) {}
  void Prepare(int64_t vocab) override {
    for (auto& m : matchers_) m->Prepare(vocab);
  }
  void MaskLogits(float* logits, int64_t vocab) override {
    for (auto& m : matchers_) m->MaskLogits(logits, vocab);
  }
  void Accept(int32_t token) override {
    for (auto& m : matchers_) m->Accept(token);
  }

 private:
  std::vector<std::unique_ptr<TokenMatcher>> matchers_;
};

class AllOf : public TokenConstraint {
 public:
  explicit AllOf(std::vector<std::shared_ptr<const TokenConstraint>> parts)
      : parts_(std::move(parts)) {}
  std::unique_ptr<TokenMatcher> NewMatcher() const override {
    std::vector<std::unique_ptr<TokenMatcher>> matchers;
    for (const auto& p : parts_) matchers.push_back(p->NewMatcher());
    return std::make_unique<AllOfMatcher>(std::move(matchers));
  }
  bool DecidesEnd() const override { return parts_.front()->DecidesEnd(); }

 private:
  std::vector<std::shared_ptr<const TokenConstraint>> parts_;
};

}  // namespace

std::shared_ptr<const TokenConstraint> AllowedTokensConstraint(std::vector<int32_t> ids) {
  return std::make_shared<AllowedTokens>(std::move(ids));
}

std::shared_ptr<const TokenConstraint> BadWordsConstraint(std::vector<std::vector<int32_t>> words) {
  return std::make_shared<BadWords>(std::move(words));
}

std::shared_ptr<const TokenConstraint> CombineConstraints(
    std::vector<std::shared_ptr<const TokenConstraint>> constraints) {
  std::erase(constraints, nullptr);
  if (constraints.empty()) return nullptr;
  if (constraints.size() == 1) return constraints.front();
  return std::make_shared<AllOf>(std::move(constraints));
}

}  // namespace strata::engine
