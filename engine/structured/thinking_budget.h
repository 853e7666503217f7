// A cap on the reasoning (vLLM's `thinking_token_budget`, Anthropic's `thinking.budget_tokens`):
// when the prompt opened the reasoning and the reply has written `budget_tokens` tokens without
// closing it, the next tokens are forced to the reasoning's close — Kimi K2's `</think>`, Kimi
// K3's `<|close|>think<|sep|><|open|>response<|sep|>` — and the answer follows. Every token, forced
// or drawn, also goes to the wrapped constraint (a ReasoningGate, or K3's XtmlReplyConstraint,
// which themselves see the reasoning end), so structured output and forced tool calls still apply
// to the answer.
//
// The close the model writes itself ends the cap: a `first_id`, then ordinary tokens whose bytes
// spell `text`, then `last_id` (K3's `C think S`; any other element, such as a tools channel
// inside the reasoning, is reasoning). The budget is checked only between elements: a reply that
// reached it with a `<|close|>` just written finishes that element first (at most the length of
// `text` in tokens more), so the forced close never lands inside another marker.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampling.h"
#include "engine/structured/token_vocab.h"

namespace strata::structured {

struct ThinkingEnd {
  int32_t first_id = -1;  // K2: </think>; K3: <|close|>
  std::string text;       // K3: "think"; K2: empty
  int32_t last_id = -1;   // K3: <|sep|>; K2: -1 (the first id alone closes)
  // What to force: first_id, the canonical ids of `text`, last_id — and for K3 the response
  // channel's opening `<|open|>response<|sep|>`, the element the format puts next.
  std::vector<int32_t> forced_ids;
};

class ThinkingBudget : public engine::TokenConstraint {
 public:
  // `inner` may be null (no constraint on the answer). budget_tokens >= 0.
  ThinkingBudget(std::shared_ptr<const engine::TokenConstraint> inner, ThinkingEnd end,
                 int64_t budget_tokens, std::shared_ptr<const TokenVocab> vocab);
  std::unique_ptr<engine::TokenMatcher> NewMatcher() const override;
  // A cap alone only filters; with an inner constraint, the inner one decides.
  bool DecidesEnd() const override { return inner_ != nullptr && inner_->DecidesEnd(); }

 private:
  std::shared_ptr<const engine::TokenConstraint> inner_;
  ThinkingEnd end_;
  int64_t budget_tokens_;
  std::shared_ptr<const TokenVocab> vocab_;
};

}  // namespace strata::structured
