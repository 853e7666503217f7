#include "server/lockstep.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/log.h"

namespace strata::server {

CommunicatorStepGate::CommunicatorStepGate(dist::Communicator* comm) : comm_(comm) {
  CHECK(comm_ != nullptr);
}

int CommunicatorStepGate::rank() const { return comm_->rank(); }
int CommunicatorStepGate::world_size() const { return comm_->world_size(); }

absl::StatusOr<GateDecision> CommunicatorStepGate::Agree(const GateVote& vote) {
  int64_t counts[2] = {vote.has_work ? 1 : 0, vote.stopping ? 1 : 0};
  const absl::Status status = comm_->AllReduce(counts, 2, dist::ReduceOp::kSum);
  ++num_agreements_;
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("step gate all-reduce #", num_agreements_,
                                                    " (has-work vote): ", status.message()));
  }
  GateDecision decision;
  decision.num_ranks_with_work = counts[0];
  decision.num_ranks_stopping = counts[1];
  decision.world_size = comm_->world_size();
  return decision;
}

void ExitOnCollectiveError(int rank, absl::string_view what, const absl::Status& status) {
  const std::string message = absl::StrCat("rank ", rank, ": ", what, " failed: ", status.message(),
                                           "; exiting with status ", kCollectiveFailureExitCode,
                                           " so the orchestrator restarts the group");
  if (log::Enabled(log::Level::kError)) {
    LOG_ERROR("lockstep", "{}", message);
    log::Logger().flush();
  } else {  // --log-level off: a fatal exit still says why
    std::fprintf(stderr, "strata: %s\n", message.c_str());
  }
  std::fflush(stderr);
  std::_Exit(kCollectiveFailureExitCode);
}

}  // namespace strata::server
