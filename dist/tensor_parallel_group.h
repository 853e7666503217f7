// The collectives of a tensor-parallel group (engine/tensor_parallel.h) over a Communicator:
// Gloo for CPU ranks. A failed collective (a peer exited or stopped answering within the
// communicator's timeout) ends the process like a failed expert exchange: the error names the
// collective, the rank and the group size, and the exit status (kExpertExchangeFailureExitCode,
// EX_TEMPFAIL) tells the orchestrator to restart the group. Never a silent hang.
#pragma once

#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "engine/tensor_parallel.h"

namespace strata::dist {

class CommunicatorTensorParallelGroup : public engine::TensorParallelGroup {
 public:
  // `comm` connects exactly the ranks of one group (its rank = the tensor-parallel rank) and
  // must outlive this object; one thread uses both at a time.
  explicit CommunicatorTensorParallelGroup(Communicator* comm);

  int rank() const override;
  int size() const override;
  void AllReduceSum(float* data, int64_t count) override;
  void AllGather(const float* send, int64_t count, float* recv) override;
  void BroadcastFromLead(void* data, int64_t bytes) override;
  void AllToAll(const float* send, float* recv, int64_t count_per_rank) override;
  TensorParallelGroup* context_parallel() override { return context_parallel_; }
  // The C-rank group of this rank (1 < C < T); must outlive this object.
  void set_context_parallel(TensorParallelGroup* group) { context_parallel_ = group; }

  // Collectives so far and the bytes this rank contributed to them (for `strata bench`).
  struct Stats {
    int64_t all_reduces = 0;
    int64_t all_reduce_bytes = 0;
    int64_t all_gathers = 0;
    int64_t all_gather_bytes = 0;
    int64_t all_to_alls = 0;
    int64_t all_to_all_bytes = 0;
    int64_t broadcasts = 0;
    int64_t broadcast_bytes = 0;
    double seconds = 0.0;  // wall time inside the collectives
  };
  const Stats& stats() const { return stats_; }

 private:
  Communicator* comm_;
  TensorParallelGroup* context_parallel_ = nullptr;
  Stats stats_;
};

}  // namespace strata::dist
