// What `strata serve` needs per local data-parallel rank when the group has several ranks
// (server/MULTIRANK.md): a communicator (shared memory or Gloo; each local rank connects its own),
// the expert-parallel MoE exchange over it, and a forward workspace (local ranks share one Model).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/communicator.h"
#include "dist/expert_placement.h"
#include "dist/moe_dispatch.h"
#include "dist/tensor_parallel_group.h"
#include "engine/model_config.h"
#include "engine/workspace.h"
#include "server/cli/parallel_flags.h"

namespace strata::cli {

struct LocalRanks {
  dist::ExpertPlacement placement;  // empty (num_experts 0) for a model without MoE layers
  // [local_ranks] each; exchanges are null for a model without MoE layers (or when the CUDA
  // executor exchanges on the device).
  std::vector<std::unique_ptr<dist::Communicator>> comms;
  std::vector<std::unique_ptr<dist::ExpertParallelExchange>> exchanges;
  std::vector<std::unique_ptr<engine::Workspace>> workspaces;
};

// Connects every local rank at once, one thread each (the rendezvous waits for all ranks up to
// `rendezvous_timeout`): connect(options with this rank, group and limits, local rank). Errors
// name the rank, `what` it joins and the coordinator. `group_size` 0: one group of the whole
// world; else groups of that many consecutive ranks (it divides the world size), group g named
// "<group>-<g>", each rank joining its own with its rank in it.
using ConnectFn = std::function<absl::StatusOr<std::unique_ptr<dist::Communicator>>(
    const dist::RendezvousOptions& options, int local_rank)>;
absl::StatusOr<std::vector<std::unique_ptr<dist::Communicator>>> ConnectEachLocalRank(
    const ParallelOptions& parallel, const std::string& group, const std::string& what,
    ConnectFn connect, int group_size = 0);

// The group's backend: shared memory (dist/shm_communicator.h) when every rank runs on this host
// — all of them in this process, or processes meeting at a loopback coordinator — else Gloo
// over TCP (also when the environment sets STRATA_CPU_COMM=gloo). Logs the choice once, with
// the size of the groups (`group_size`; 0: the world).
ConnectFn HostLocalOrGloo(const ParallelOptions& parallel, const std::string& what,
                          int group_size = 0);

// Decode context parallelism over fewer ranks than the tensor-parallel group (1 < C < T): each
// local rank's communicator over its context-parallel group of C consecutive ranks
// ("<group>-<g>", g = rank / C; ConnectEachLocalRank), set on that rank's tensor-parallel group
// in `tp_groups` (TensorParallelGroup::context_parallel), which must not outlive the result.
// Empty when C is 1 or T (the tensor-parallel group serves).
struct ContextParallelGroups {
  std::vector<std::unique_ptr<dist::Communicator>> comms;
  std::vector<std::unique_ptr<dist::CommunicatorTensorParallelGroup>> groups;
};
absl::StatusOr<ContextParallelGroups> ConnectContextParallelGroups(
    const ParallelOptions& parallel, int tp_size, int cp_size, const std::string& group,
    ConnectFn connect,
    const std::vector<std::unique_ptr<dist::CommunicatorTensorParallelGroup>>& tp_groups);

// Reads the placement (--expert-placement, else an even split), then connects every local rank
// to the group (ConnectEachLocalRank). `cpu_exchanges` false: no ExpertParallelExchange (the
// CUDA executor brings its own).
absl::StatusOr<std::unique_ptr<LocalRanks>> ConnectLocalRanks(const ParallelOptions& parallel,
                                                              const engine::ModelConfig& config,
                                                              bool cpu_exchanges = true);

// The routed experts held by this process's local ranks under the placement ConnectLocalRanks
// will read: [num_experts], true for those this process runs (its weight copy needs only them,
// ModelLoadOptions::routed_experts). Errors: those of --expert-placement.
absl::StatusOr<std::vector<bool>> ProcessRoutedExperts(const ParallelOptions& parallel,
                                                       int num_experts);
// The same for global ranks [first_rank, first_rank + num_ranks) only.
absl::StatusOr<std::vector<bool>> RanksRoutedExperts(const ParallelOptions& parallel,
                                                     int num_experts, int first_rank,
                                                     int num_ranks);

}  // namespace strata::cli
