#include "server/tensor_parallel_follower.h"

#include "core/log.h"

namespace strata::server {

int64_t RunTensorParallelFollower(StepGate& gate, engine::StepFollower& executor) {
  LOG_INFO("engine", "tensor-parallel rank {}/{} following its lead's steps", gate.rank(),
           gate.world_size());
  int64_t steps = 0;
  while (true) {
    // The lead paces the agreements (it waits for input between idle ones); this call blocks
    // until every rank arrived.
    absl::StatusOr<GateDecision> decision = gate.Agree({/*has_work=*/false, /*stopping=*/true});
    if (!decision.ok()) ExitOnCollectiveError(gate.rank(), "the engine step", decision.status());
    if (decision->any_work()) {
      executor.FollowStep();
      ++steps;
    }
    if (decision->all_stopping()) break;
  }
  LOG_INFO("engine", "tensor-parallel rank {} stopped after {} steps", gate.rank(), steps);
  return steps;
}

}  // namespace strata::server
