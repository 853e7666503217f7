// The multi-rank flags of `strata serve` (server/MULTIRANK.md): which ranks this process runs
// and how it finds the others.
//
//   one rank per process    --world-size N --rank R --coordinator HOST:PORT
//   L ranks per process     --local-ranks L --node-rank K [--num-nodes G] --coordinator ...
//                           (global ranks K·L … K·L+L−1, world size G·L)
//   T-way tensor parallel   --tensor-parallel-size T (one process, T threads) or with
//                           --world-size T --rank R (one process per rank); rank 0 serves
//   D groups of T           --tensor-parallel-size T with a world of D·T ranks (--world-size,
//                           or vLLM's --data-parallel-size D): ranks g·T … g·T+T−1 form group
//                           g, the routed experts spread over all D·T ranks; each group's first
//                           rank serves; a process runs whole groups or a part of one
//   R replicas              --replicas R: R independent copies of the whole model in this
//                           process (each its own engine loop and caches — and GPU with
//                           --device cuda), no collectives; requests go to the least loaded.
//                           Not with --world-size / --local-ranks > 1 (expert parallelism).
//
// Kubernetes LeaderWorkerSet environment supplies defaults for what the flags leave out:
//   LWS_LEADER_ADDRESS  coordinator host (port: --coordinator-port, default 29500)
//   LWS_WORKER_INDEX    node rank
//   LWS_GROUP_SIZE      number of nodes
// Flags win over the environment. World size 1 (the default) uses no network at all.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/cli/flags.h"

namespace strata::cli {

inline constexpr int kDefaultCoordinatorPort = 29500;

struct ParallelOptions {
  int world_size = 1;
  int num_nodes = 1;        // processes of the group (LWS group size)
  int node_rank = 0;        // this process's index among them
  int local_ranks = 1;      // data-parallel ranks (engine loops) in this process
  int first_rank = 0;       // global rank of local rank 0 (= node_rank · local_ranks)
  std::string coordinator;  // host:port of rank 0's rendezvous listener; empty when world is 1
  // Every rank in this process and no coordinator address or port given: `coordinator` is the
  // default 127.0.0.1:29500, which `strata serve` replaces with an ephemeral port.
  bool coordinator_defaulted = false;
  std::chrono::milliseconds collective_timeout{60000};
  std::chrono::milliseconds rendezvous_timeout{600000};
  std::string expert_placement_file;  // empty: experts split evenly, no replicas
  int replicas = 1;  // --replicas: whole-model copies in this process (world size 1)
  // --tensor-parallel-size: ranks holding one copy of the model between them; it divides the
  // world size (world / T data-parallel groups, ranks g·T … g·T+T−1 in group g) and the local
  // ranks divide it or are a multiple of it. Rank 0 of each group serves the APIs; the others
  // only compute (server/tensor_parallel_follower.h).
  int tensor_parallel_size = 1;
  // --decode-context-parallel-size: ranks of the group that split each sequence's latent cache
  // by position (1, or the tensor-parallel size).
  int decode_context_parallel_size = 1;

  bool multi_rank() const { return world_size > 1; }
  bool tensor_parallel() const { return tensor_parallel_size > 1; }
  // Several data-parallel groups of tensor_parallel_size ranks: the expert exchange spans them.
  bool data_parallel_groups() const { return world_size > tensor_parallel_size; }
  int data_parallel_size() const { return world_size / tensor_parallel_size; }
  // Whether this process runs the lead rank of its tensor-parallel group (always without TP).
  bool leads_tensor_parallel_group() const {
    return !tensor_parallel() || first_rank % tensor_parallel_size == 0;
  }
  // Engine loops in this process: the local ranks of a group (under tensor parallelism the
  // groups' lead ranks), or the replicas.
  int num_engine_ranks() const {
    if (!multi_rank()) return replicas;
    if (!tensor_parallel()) return local_ranks;
    if (local_ranks >= tensor_parallel_size) return local_ranks / tensor_parallel_size;
    return leads_tensor_parallel_group() ? 1 : 0;
  }
};

// The flag specs above, for the serve command's list and --help.
const std::vector<FlagSpec>& ParallelFlagSpecs();
// Help text on the LWS environment (appended to `strata serve --help`).
std::string ParallelEnvHelp();

// Reads the flags (and, for defaults, the environment through `getenv`; nullptr = the process
// environment). InvalidArgument naming the flag or variable and the limit on inconsistent values
// (e.g. "--rank 2 must be < --world-size 2").
absl::StatusOr<ParallelOptions> ParallelOptionsFromFlags(
    const Flags& flags,
    const std::function<std::optional<std::string>(const char*)>& getenv = nullptr);

}  // namespace strata::cli
