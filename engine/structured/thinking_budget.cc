// thinking_budget.h: count the reasoning's tokens; past the budget, force its close.
#include "engine/structured/thinking_budget.h"

#include <limits>

#include "core/check.h"

namespace strata::structured {
namespace {

class BudgetMatcher : public engine::TokenMatcher {
 public:
  BudgetMatcher(std::unique_ptr<engine::TokenMatcher> inner, const ThinkingEnd* end,
                int64_t budget_tokens, const TokenVocab* vocab)
      : inner_(std::move(inner)), end_(end), budget_tokens_(budget_tokens), vocab_(vocab) {}

  void Prepare(int64_t vocab) override {
    if (inner_ && !Forcing()) inner_->Prepare(vocab);
  }

  void MaskLogits(float* logits, int64_t vocab) override {
    if (!Forcing()) {
      if (inner_) inner_->MaskLogits(logits, vocab);
      return;
    }
    const int32_t forced = end_->forced_ids[forced_];
    for (int64_t id = 0; id < vocab; ++id) {
      if (id != forced) logits[id] = -std::numeric_limits<float>::infinity();
    }
  }

  void Accept(int32_t token) override {
    if (inner_) inner_->Accept(token);
    if (state_ == State::kAnswering) return;
    if (Forcing()) state_ = State::kForcing;  // this token is the first forced one
    if (state_ == State::kForcing) {
      if (++forced_ == end_->forced_ids.size()) state_ = State::kAnswering;
      return;
    }
    ++reasoning_tokens_;
    Track(token);
    if (state_ == State::kReasoning && !in_element_ && reasoning_tokens_ >= budget_tokens_) {
      state_ = State::kForcing;
    }
  }

 private:
  enum class State : uint8_t { kReasoning, kForcing, kAnswering };

  bool Forcing() const {
    return state_ == State::kForcing ||
           (state_ == State::kReasoning && !in_element_ && reasoning_tokens_ >= budget_tokens_);
  }

  // Follows the model's own close: first_id, bytes spelling `text`, last_id.
  void Track(int32_t token) {
    if (!in_element_) {
      if (token != end_->first_id) return;
      if (end_->last_id < 0) {
        state_ = State::kAnswering;
        return;
      }
      in_element_ = true;
      spelled_.clear();
      return;
    }
    if (token == end_->last_id) {
      in_element_ = false;
      if (spelled_ == end_->text) state_ = State::kAnswering;
      return;
    }
    if (token == end_->first_id) {  // another element begins
      spelled_.clear();
      return;
    }
    spelled_ += token >= 0 && token < vocab_->size() ? vocab_->bytes(token) : std::string();
    // Not the reasoning's close: some other element (or text) goes on as reasoning. Stay in it
    // only while its name can still become `text` or could be another tag's (the budget then
    // waits for its <|sep|>, a few tokens at most).
    if (spelled_.size() > 64) in_element_ = false;
  }

  std::unique_ptr<engine::TokenMatcher> inner_;
  const ThinkingEnd* end_;
  int64_t budget_tokens_;
  const TokenVocab* vocab_;
  State state_ = State::kReasoning;
  int64_t reasoning_tokens_ = 0;
  bool in_element_ = false;  // after first_id, before last_id
  std::string spelled_;      // the bytes since first_id
  size_t forced_ = 0;        // forced ids accepted
};

}  // namespace

ThinkingBudget::ThinkingBudget(std::shared_ptr<const engine::TokenConstraint> inner,
                               ThinkingEnd end, int64_t budget_tokens,
                               std::shared_ptr<const TokenVocab> vocab)
    : inner_(std::move(inner)),
      end_(std::move(end)),
      budget_tokens_(budget_tokens),
      vocab_(std::move(vocab)) {
  CHECK_GE(end_.first_id, 0);
  CHECK(!end_.forced_ids.empty());
  CHECK_GE(budget_tokens_, 0);
  CHECK(vocab_ != nullptr);
}

std::unique_ptr<engine::TokenMatcher> ThinkingBudget::NewMatcher() const {
  return std::make_unique<BudgetMatcher>(inner_ ? inner_->NewMatcher() : nullptr, &end_,
                                         budget_tokens_, vocab_.get());
}

}  // namespace strata::structured
