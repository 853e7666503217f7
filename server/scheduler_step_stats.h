// StepStats (server/metrics.h) from two scheduler snapshots: the state before and after one or
// more engine steps. Counts come from the scheduler's running totals, so the result is right
// whether the engine loop calls it after every step or a poller calls it now and then.
#pragma once

#include <cstdint>

#include "scheduler/scheduler_stats.h"
#include "server/metrics.h"

namespace strata::server {

// `step_seconds`: wall time of the step(s) between the snapshots. `kda_checkpoint_bytes_each`:
// bytes of one KDA checkpoint (all KDA layers), from the cache layout. expert_tokens and
// all_to_all_seconds are left empty: the executor, not the scheduler, measures them.
StepStats StepStatsFromScheduler(const scheduler::SchedulerStats& before,
                                 const scheduler::SchedulerStats& after, double step_seconds,
                                 int64_t kda_checkpoint_bytes_each);

}  // namespace strata::server
