#include "server/cli/serve_ranks.h"

#include <cstdlib>
#include <string_view>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/log.h"
#include "core/status.h"
#include "dist/gloo_communicator.h"
#include "dist/rendezvous.h"
#include "dist/shm_communicator.h"

namespace strata::cli {
namespace {

absl::StatusOr<dist::ExpertPlacement> ReadPlacement(const ParallelOptions& p, int num_experts) {
  if (p.expert_placement_file.empty()) return dist::EvenPlacement(num_experts, p.world_size);
  absl::StatusOr<dist::ExpertPlacement> placement =
      dist::LoadPlacement(p.expert_placement_file, num_experts, p.world_size);
  if (!placement.ok()) {
    return absl::Status(placement.status().code(),
                        absl::StrCat("--expert-placement: ", placement.status().message()));
  }
  return placement;
}

// Whether every rank of the group runs on this host.
bool AllRanksOnThisHost(const ParallelOptions& p) {
  if (p.local_ranks == p.world_size) return true;
  absl::StatusOr<dist::HostPort> coordinator = dist::ParseHostPort(p.coordinator);
  if (!coordinator.ok()) return false;  // the rendezvous reports it
  return coordinator->host == "localhost" || coordinator->host.rfind("127.", 0) == 0;
}

}  // namespace

ConnectFn HostLocalOrGloo(const ParallelOptions& p, const std::string& what, int group_size) {
  // STRATA_CPU_COMM=gloo keeps Gloo on one host (to compare the two, or to rule one out).
  const char* forced = std::getenv("STRATA_CPU_COMM");
  const bool shm = AllRanksOnThisHost(p) && !(forced && std::string_view(forced) == "gloo");
  LOG_INFO("cli", "{}: {} ranks, {}", what, group_size > 0 ? group_size : p.world_size,
           shm ? "shared memory (every rank on this host)" : "Gloo over TCP");
  if (shm) {
    return [](const dist::RendezvousOptions& o, int) { return dist::ConnectSharedMemory(o); };
  }
  return [](const dist::RendezvousOptions& o, int) { return dist::ConnectGloo(o); };
}

absl::StatusOr<std::vector<std::unique_ptr<dist::Communicator>>> ConnectEachLocalRank(
    const ParallelOptions& p, const std::string& group, const std::string& what, ConnectFn connect,
    int group_size) {
  const size_t n = static_cast<size_t>(p.local_ranks);
  const int size = group_size > 0 ? group_size : p.world_size;
  CHECK(p.world_size % size == 0) << "groups of " << size << " in a world of " << p.world_size;
  std::vector<absl::StatusOr<std::unique_ptr<dist::Communicator>>> connected;
  for (size_t i = 0; i < n; ++i) connected.emplace_back(absl::UnknownError("not connected"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      const int rank = p.first_rank + static_cast<int>(i);
      dist::RendezvousOptions o;
      o.world_size = size;
      o.rank = rank % size;
      o.coordinator = p.coordinator;
      // Sub-groups meet at the store world rank 0 serves (it is in sub-group 0).
      o.group = size < p.world_size ? absl::StrCat(group, "-", rank / size) : group;
      o.rank0_serves_store = rank / size == 0;
      o.connect_timeout = p.rendezvous_timeout;
      o.timeout = p.collective_timeout;
      connected[i] = connect(o, static_cast<int>(i));
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::unique_ptr<dist::Communicator>> comms;
  for (size_t i = 0; i < n; ++i) {
    if (!connected[i].ok()) {
      return absl::Status(
          connected[i].status().code(),
          absl::StrCat("rank ", p.first_rank + static_cast<int>(i), " could not join ", what,
                       " at ", p.coordinator, ": ", connected[i].status().message()));
    }
    comms.push_back(std::move(*connected[i]));
  }
  return comms;
}

absl::StatusOr<ContextParallelGroups> ConnectContextParallelGroups(
    const ParallelOptions& p, int tp_size, int cp_size, const std::string& group, ConnectFn connect,
    const std::vector<std::unique_ptr<dist::CommunicatorTensorParallelGroup>>& tp_groups) {
  ContextParallelGroups out;
  if (cp_size <= 1 || cp_size >= tp_size) return out;
  CHECK(tp_size % cp_size == 0) << "C = " << cp_size << " divides T = " << tp_size;
  ASSIGN_OR_RETURN(out.comms, ConnectEachLocalRank(p, group, "the context-parallel group",
                                                   std::move(connect), cp_size));
  CHECK_EQ(out.comms.size(), tp_groups.size());
  for (size_t i = 0; i < out.comms.size(); ++i) {
    out.groups.push_back(
        std::make_unique<dist::CommunicatorTensorParallelGroup>(out.comms[i].get()));
    tp_groups[i]->set_context_parallel(out.groups.back().get());
  }
  return out;
}

absl::StatusOr<std::unique_ptr<LocalRanks>> ConnectLocalRanks(const ParallelOptions& p,
                                                              const engine::ModelConfig& config,
                                                              bool cpu_exchanges) {
  auto ranks = std::make_unique<LocalRanks>();
  const int num_experts = config.moe.num_experts;
  if (num_experts > 0) {
    ASSIGN_OR_RETURN(ranks->placement, ReadPlacement(p, num_experts));
    LOG_INFO("serve", "expert placement over {} ranks: {}", p.world_size,
             ranks->placement.DebugString());
  } else if (!p.expert_placement_file.empty()) {
    return absl::InvalidArgumentError("--expert-placement given but the model has no MoE layers");
  }
  ASSIGN_OR_RETURN(ranks->comms,
                   ConnectEachLocalRank(p, "strata", "the group",
                                        HostLocalOrGloo(p, "the data-parallel group")));
  for (size_t i = 0; i < ranks->comms.size(); ++i) {
    ranks->workspaces.push_back(std::make_unique<engine::Workspace>());
    ranks->exchanges.push_back(num_experts > 0 && cpu_exchanges
                                   ? std::make_unique<dist::ExpertParallelExchange>(
                                         ranks->comms[i].get(), ranks->placement)
                                   : nullptr);
  }
  LOG_INFO("serve", "ranks {}..{} of {} connected through {} ({} backend)", p.first_rank,
           p.first_rank + p.local_ranks - 1, p.world_size, p.coordinator,
           ranks->comms[0]->backend());
  return ranks;
}

absl::StatusOr<std::vector<bool>> ProcessRoutedExperts(const ParallelOptions& p, int num_experts) {
  return RanksRoutedExperts(p, num_experts, p.first_rank, p.local_ranks);
}

absl::StatusOr<std::vector<bool>> RanksRoutedExperts(const ParallelOptions& p, int num_experts,
                                                     int first_rank, int num_ranks) {
  ASSIGN_OR_RETURN(dist::ExpertPlacement placement, ReadPlacement(p, num_experts));
  std::vector<bool> held(static_cast<size_t>(num_experts), false);
  for (int r = first_rank; r < first_rank + num_ranks; ++r) {
    for (int e : placement.local[static_cast<size_t>(r)]) held[static_cast<size_t>(e)] = true;
  }
  return held;
}

}  // namespace strata::cli
