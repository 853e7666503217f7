// A constraint that starts after the reasoning: while the reply is still inside `<think>`
// (the prompt opened it), every token is allowed; once the `</think>` token is generated, the
// wrapped constraint (structured output, forced tool calls) applies to the answer — as vLLM
// does with a reasoning parser.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/sampling.h"

namespace strata::structured {

class ReasoningGate : public engine::TokenConstraint {
 public:
  ReasoningGate(std::shared_ptr<const engine::TokenConstraint> inner, int32_t think_end_id);
  std::unique_ptr<engine::TokenMatcher> NewMatcher() const override;

 private:
  std::shared_ptr<const engine::TokenConstraint> inner_;
  int32_t think_end_id_;
};

}  // namespace strata::structured
