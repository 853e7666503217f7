// The other ranks of a tensor-parallel group (engine/tensor_parallel.h). The lead rank (0) runs
// the scheduler and the engine loop and answers requests; every other rank has neither: in each
// step it runs the lead's plan on its shard (engine::StepFollower: the CPU or CUDA executor),
// taking part in the same StepGate agreements (lockstep.h) so that an idle lead idles the whole
// group.
#pragma once

#include "engine/executor.h"
#include "server/lockstep.h"

namespace strata::server {

// Runs this rank's side of every step until every rank of the group stops (a follower always
// votes "no work, ready to stop", so the group stops when its lead does). A failed collective
// ends the process (ExitOnCollectiveError: the orchestrator restarts the group). Returns the
// number of steps followed.
int64_t RunTensorParallelFollower(StepGate& gate, engine::StepFollower& executor);

}  // namespace strata::server
