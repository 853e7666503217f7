// A StepPlan as bytes, for the ranks of a tensor-parallel group (engine/tensor_parallel.h): the
// lead rank's scheduler plans each step, the other ranks run the same plan on their shards. The
// bytes carry everything the forward and the caches need; samplers stay on the lead (the other
// ranks never sample: they learn how many drafts the lead accepted, CpuExecutor).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/step.h"

namespace strata::engine {

// Appends the plan to `out` (cleared first).
void EncodeStepPlan(const StepPlan& plan, std::vector<uint8_t>* out);
// The plan EncodeStepPlan wrote (sampler null); InvalidArgument on truncated or malformed bytes.
absl::StatusOr<StepPlan> DecodeStepPlan(absl::Span<const uint8_t> bytes);

class TensorParallelGroup;  // engine/tensor_parallel.h

// The lead rank (0) of `group` sends `plan` to the others (`bytes`: scratch kept between steps).
void SendStepPlan(TensorParallelGroup& group, const StepPlan& plan, std::vector<uint8_t>* bytes);
// A follower's side: the lead's next plan, or nullopt when the lead ended the group
// (EndStepPlans). Malformed bytes are a bug (the same binary writes them): CHECK.
std::optional<StepPlan> ReceiveStepPlan(TensorParallelGroup& group, std::vector<uint8_t>* bytes);
// The lead tells every follower that no plan comes any more.
void EndStepPlans(TensorParallelGroup& group);

}  // namespace strata::engine
