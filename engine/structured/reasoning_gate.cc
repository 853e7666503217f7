// reasoning_gate.h: no mask until `</think>`, then the wrapped constraint's.
#include "engine/structured/reasoning_gate.h"

#include "core/check.h"

namespace strata::structured {
namespace {

class GateMatcher : public engine::TokenMatcher {
 public:
  GateMatcher(std::unique_ptr<engine::TokenMatcher> inner, int32_t think_end_id)
      : inner_(std::move(inner)), think_end_id_(think_end_id) {}

  void Prepare(int64_t vocab) override {
    if (answering_) inner_->Prepare(vocab);
  }
  void MaskLogits(float* logits, int64_t vocab) override {
    if (answering_) inner_->MaskLogits(logits, vocab);
  }
  void Accept(int32_t token) override {
    if (answering_) {
      inner_->Accept(token);
    } else if (token == think_end_id_) {
      answering_ = true;
    }
  }

 private:
  std::unique_ptr<engine::TokenMatcher> inner_;
  int32_t think_end_id_;
  bool answering_ = false;
};

}  // namespace

ReasoningGate::ReasoningGate(std::shared_ptr<const engine::TokenConstraint> inner,
                             int32_t think_end_id)
    : inner_(std::move(inner)), think_end_id_(think_end_id) {
  CHECK(inner_ != nullptr);
  CHECK_GE(think_end_id_, 0);
}

std::unique_ptr<engine::TokenMatcher> ReasoningGate::NewMatcher() const {
  return std::make_unique<GateMatcher>(inner_->NewMatcher(), think_end_id_);
}

}  // namespace strata::structured
