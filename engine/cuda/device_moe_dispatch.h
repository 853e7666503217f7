// Expert parallelism on GPUs: DeviceExpertExchange (expert_exchange.h) over a dist::Communicator
// whose buffers are device memory (NCCL on GPUs; on the CPU emulator, whose device memory is
// host memory, any backend). The same protocol as the CPU exchange (dist/moe_dispatch.h), per
// MoE layer and step, on every rank in lockstep:
//
//   1. ids/weights [rows, top_k] come to the host (one stream synchronisation); each (row, slot)
//      goes to ExpertPlacement::RankFor(expert, rank, row), a row once per destination rank
//   2. counts   AllToAll of int64 row counts
//   3. dispatch AllToAllV ×3, in destination order: z rows [n_d, width] bf16 (gathered on the
//               device), ids [n_d, top_k] as the destination's LOCAL expert indices (−1: a
//               slot another rank runs), weights [n_d, top_k] f32 (0 there)
//   4. experts  `run` once over every received row (the local grouped GEMMs)
//   5. combine  AllToAllV of the weighted partial sums [n, width] f32, back in arrival order
//   6. sum      routed[row] = Σ over the row's destinations (MoeCombine with unit weights)
//
// Before each collective the compute stream is synchronised (a backend with its own stream,
// NCCL, reads the buffers only then); collectives return when their data has arrived.
// Scratch comes from the step's device arena; host staging is pinned and grows to the largest
// step. A collective that fails ends the process (dist::ExitOnExchangeFailure): the group is
// then unusable and the orchestrator restarts it, as on the CPU.
//
// Thread-safety: Exchange / TakeExpertTokens from the rank's engine thread; stats() from any.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "dist/communicator.h"
#include "dist/expert_placement.h"
#include "dist/moe_dispatch.h"
#include "engine/cuda/expert_exchange.h"
#include "kernels/cuda/device_buffer.h"

namespace strata::engine::cuda {

class DeviceExpertParallelExchange final : public DeviceExpertExchange {
 public:
  // `comm` must outlive the exchange; placement.world_size == comm->world_size() (CHECKed).
  DeviceExpertParallelExchange(dist::Communicator* comm, dist::ExpertPlacement placement);

  const std::vector<int>& local_experts() const override { return local_experts_; }
  absl::Status Exchange(int moe_layer, const uint16_t* z, int64_t rows, int64_t width, int top_k,
                        const int32_t* ids, const float* weights, float* routed,
                        const DeviceContext& ctx, RunLocalExperts run) override;
  void TakeExpertTokens(std::vector<int64_t>* expert_tokens) override;

  const dist::ExpertPlacement& placement() const { return placement_; }
  // Accumulated since the previous call (expert_tokens stays empty: TakeExpertTokens has them).
  dist::ExpertExchangeStats stats();

 private:
  // Step 1 on the host: destinations, counts, the records' metadata (staged for one upload).
  void PlanRecords(const int32_t* ids, const float* weights, int64_t rows, int top_k);
  // Synchronises the stream, then runs one collective, timing it; a failure ends the process.
  template <typename Fn>
  void Collective(const char* name, int moe_layer, cudaStream_t stream, Fn fn);

  dist::Communicator* const comm_;
  const dist::ExpertPlacement placement_;
  const int rank_;
  const int world_size_;
  std::vector<int> local_experts_;
  std::vector<std::vector<int32_t>> local_index_;  // [rank][expert] → index on that rank, or −1

  // Per call, sized to the group: row counts and byte counts.
  std::vector<int64_t> send_rows_, recv_rows_, send_first_, fill_, send_bytes_, recv_bytes_;
  int64_t total_send_ = 0, total_recv_ = 0;
  std::vector<int32_t> slot_rank_;  // [rows, top_k] destination of each slot, −1: none
  // Host staging of the records' metadata, uploaded in one copy (4-byte words):
  //   src_row [total_send] | ids [total_send, top_k] | weights [total_send, top_k] |
  //   pair_row [rows, top_k] (records of each row, −1 padded) | ones [rows, top_k]
  kernels::cuda::PinnedBuffer staging_;
  kernels::cuda::PinnedBuffer routes_host_;  // ids + weights of the rows, from the device
  std::vector<int64_t> expert_tokens_;       // [num_experts] since TakeExpertTokens
  double collective_seconds_ = 0;

  absl::Mutex stats_mu_;
  dist::ExpertExchangeStats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace strata::engine::cuda
