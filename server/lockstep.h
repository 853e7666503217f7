// Lockstep of the data-parallel ranks of one serving group (docs/architecture.md, "Parallelism").
//
// The MoE all-to-all needs every rank in every step, so before each step every rank's engine
// loop calls StepGate::Agree once with its vote (has work, wants to stop) and all ranks get the
// same answer:
//
//   any rank has work   → every rank runs the step (a rank without work runs an empty plan:
//                         Model::Forward on an empty batch still takes part in each exchange)
//   all ranks stopping  → every rank leaves the loop
//   otherwise           → the group idles: each rank waits for local input up to the poll
//                         interval (5 ms, doubling to 20 ms while idle; EngineLoopOptions),
//                         then agrees again: one tiny collective per interval, never a busy loop
//
// A failed Agree (a peer exited or stopped answering: the communicator's timeout) is fatal for
// the process: ExitOnCollectiveError logs the rank and the collective and exits non-zero, so
// the orchestrator restarts the whole group. Never a silent hang.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dist/communicator.h"

namespace strata::server {

struct GateVote {
  bool has_work = false;  // this rank has sequences to schedule
  bool stopping = false;  // this rank's loop was asked to stop (it no longer takes work)
};

struct GateDecision {
  int64_t num_ranks_with_work = 0;
  int64_t num_ranks_stopping = 0;
  int64_t world_size = 1;
  bool any_work() const { return num_ranks_with_work > 0; }
  bool all_stopping() const { return num_ranks_stopping == world_size; }
};

// One rank's side of the agreement. Every rank of the group calls Agree the same number of
// times (one thread per gate). Errors name the collective and the rank that failed.
class StepGate {
 public:
  virtual ~StepGate() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual absl::StatusOr<GateDecision> Agree(const GateVote& vote) = 0;
};

// The gate over a communicator: one AllReduce(kSum) of two int64 per Agree. The communicator
// must outlive the gate; it may also carry the MoE exchange of the same engine thread (calls
// stay in the same order on every rank because every rank runs the same steps).
class CommunicatorStepGate : public StepGate {
 public:
  explicit CommunicatorStepGate(dist::Communicator* comm);
  int rank() const override;
  int world_size() const override;
  absl::StatusOr<GateDecision> Agree(const GateVote& vote) override;

 private:
  dist::Communicator* comm_;
  int64_t num_agreements_ = 0;
};

// Exit status after a failed collective (EX_TEMPFAIL, "try again": restart the group; the same
// as dist::kExpertExchangeFailureExitCode).
inline constexpr int kCollectiveFailureExitCode = 75;

// Logs at error level "rank R: <what> failed: <status message>; exiting ..." and ends the
// process with kCollectiveFailureExitCode through std::_Exit (no destructors run: other threads
// may be blocked in collectives or hold the model).
[[noreturn]] void ExitOnCollectiveError(int rank, absl::string_view what,
                                        const absl::Status& status);

}  // namespace strata::server
