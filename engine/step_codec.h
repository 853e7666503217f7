// A StepPlan as bytes, for the ranks of a tensor-parallel group (engine/tensor_parallel.h): the
// lead rank's scheduler plans each step, the other ranks run the same plan on their shards. The
// bytes carry everything the forward and the caches need; samplers stay on the lead (the other
// ranks never sample: they learn how many drafts the lead accepted, CpuExecutor).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/step.h"

namespace strata::engine {

// Appends the plan to `out` (cleared first).
void EncodeStepPlan(const StepPlan& plan, std::vector<uint8_t>* out);
// The plan EncodeStepPlan wrote (sampler null); InvalidArgument on truncated or malformed bytes.
absl::StatusOr<StepPlan> DecodeStepPlan(absl::Span<const uint8_t> bytes);

}  // namespace strata::engine
