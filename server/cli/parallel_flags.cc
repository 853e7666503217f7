#include "server/cli/parallel_flags.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strata::cli {
namespace {

constexpr int64_t kMaxRanks = 1 << 16;

using GetEnv = std::function<std::optional<std::string>(const char*)>;

std::optional<std::string> ProcessEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// An optional integer flag in [min, max].
absl::StatusOr<std::optional<int64_t>> OptionalInt(const Flags& flags, const char* name,
                                                   int64_t min, int64_t max) {
  if (!flags.Has(name)) return std::nullopt;
  ASSIGN_OR_RETURN(int64_t v, flags.GetInt(name, 0, min, max));
  return v;
}

// An optional integer environment variable in [min, max].
absl::StatusOr<std::optional<int64_t>> EnvInt(const GetEnv& getenv, const char* name, int64_t min,
                                              int64_t max) {
  std::optional<std::string> text = getenv(name);
  if (!text) return std::nullopt;
  int64_t v = 0;
  if (!absl::SimpleAtoi(*text, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name,
                                                   " must be an integer in [", min, ", ", max,
                                                   "], got '", *text, "'"));
  }
  return v;
}

absl::Status CheckHostPort(const std::string& address, const std::string& what) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be host:port with a port in [1, 65535], got '", address, "'"));
  }
  return absl::OkStatus();
}

// vLLM's default --data-parallel-rpc-port.
constexpr int64_t kVllmDataParallelRpcPort = 29550;

// Number of nodes, node rank and world size from flags, environment and each other. vLLM's
// --data-parallel-size, --data-parallel-size-local and --data-parallel-start-rank stand for
// --world-size, --local-ranks and --rank counted in tensor-parallel groups of `tp_size` ranks
// (vLLM's meaning: a data-parallel rank is a whole group); as in vLLM, a data-parallel size
// without a local size runs every rank in this process.
absl::Status ResolveLayout(const Flags& flags, const GetEnv& getenv, int64_t tp_size,
                           ParallelOptions* p) {
  ASSIGN_OR_RETURN(const std::string world_flag,
                   flags.NameOrAlias("world-size", "data-parallel-size"));
  ASSIGN_OR_RETURN(const std::string local_flag,
                   flags.NameOrAlias("local-ranks", "data-parallel-size-local"));
  ASSIGN_OR_RETURN(const std::string rank_flag,
                   flags.NameOrAlias("rank", "data-parallel-start-rank"));
  const std::string world_name = "--" + world_flag, local_name = "--" + local_flag,
                    rank_name = "--" + rank_flag;
  ASSIGN_OR_RETURN(std::optional<int64_t> world,
                   OptionalInt(flags, world_flag.c_str(), 1, kMaxRanks / tp_size));
  if (world && world_flag == "data-parallel-size") *world *= tp_size;
  const bool vllm_one_node = world_flag == "data-parallel-size" && !flags.Has(local_flag);
  ASSIGN_OR_RETURN(int64_t local,
                   flags.GetInt(local_flag, vllm_one_node ? *world : 1, 1, kMaxRanks));
  if (local_flag == "data-parallel-size-local") local *= tp_size;
  ASSIGN_OR_RETURN(std::optional<int64_t> rank,
                   OptionalInt(flags, rank_flag.c_str(), 0, kMaxRanks - 1));
  if (rank && rank_flag == "data-parallel-start-rank") *rank *= tp_size;
  ASSIGN_OR_RETURN(std::optional<int64_t> nodes, OptionalInt(flags, "num-nodes", 1, kMaxRanks));
  std::string nodes_source = "--num-nodes";
  if (!nodes) {
    ASSIGN_OR_RETURN(nodes, EnvInt(getenv, "LWS_GROUP_SIZE", 1, kMaxRanks));
    nodes_source = "LWS_GROUP_SIZE";
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> node, OptionalInt(flags, "node-rank", 0, kMaxRanks - 1));
  std::string node_source = "--node-rank";
  if (!node) {
    ASSIGN_OR_RETURN(node, EnvInt(getenv, "LWS_WORKER_INDEX", 0, kMaxRanks - 1));
    node_source = "LWS_WORKER_INDEX";
  }
  if (world && *world % local != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(world_name, " ", *world, " must be a multiple of ", local_name, " ", local));
  }
  if (world && nodes && *world != *nodes * local) {
    return absl::InvalidArgumentError(absl::StrCat(world_name, " ", *world, " does not match ",
                                                   nodes_source, " ", *nodes, " × ", local_name,
                                                   " ", local, " = ", *nodes * local));
  }
  if (!world) world = nodes.value_or(1) * local;
  if (!nodes) nodes = *world / local;
  if (rank) {
    if (*rank >= *world) {
      return absl::InvalidArgumentError(
          absl::StrCat(rank_name, " ", *rank, " must be < ", world_name, " ", *world));
    }
    if (*rank % local != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(rank_name, " ", *rank, " must be a multiple of ", local_name, " ", local,
                       " (it is the global rank of the process's first local rank)"));
    }
    if (node && *node != *rank / local) {
      return absl::InvalidArgumentError(absl::StrCat(rank_name, " ", *rank, " contradicts ",
                                                     node_source, " ", *node, " (expected ",
                                                     *rank / local, ")"));
    }
    node = *rank / local;
  }
  if (node.value_or(0) >= *nodes) {
    return absl::InvalidArgumentError(absl::StrCat(node_source, " ", *node,
                                                   " must be < the number of nodes ", *nodes, " (",
                                                   world_name, " / ", local_name, ")"));
  }
  p->local_ranks = static_cast<int>(local);
  p->world_size = static_cast<int>(*world);
  p->num_nodes = static_cast<int>(*nodes);
  p->node_rank = static_cast<int>(node.value_or(0));
  p->first_rank = p->node_rank * p->local_ranks;
  return absl::OkStatus();
}

absl::Status ResolveCoordinator(const Flags& flags, const GetEnv& getenv, ParallelOptions* p) {
  ASSIGN_OR_RETURN(int64_t port,
                   flags.GetInt("coordinator-port", kDefaultCoordinatorPort, 1, 65535));
  if (flags.Has("coordinator") && flags.Has("data-parallel-address")) {
    return absl::InvalidArgumentError(
        "--coordinator and --data-parallel-address (vLLM's) both name rank 0's address: give one");
  }
  if (flags.Has("data-parallel-rpc-port") && !flags.Has("data-parallel-address")) {
    return absl::InvalidArgumentError(
        "--data-parallel-rpc-port is the port of --data-parallel-address: give both");
  }
  if (std::optional<std::string> flag = flags.Get("coordinator")) {
    p->coordinator = *flag;
    RETURN_IF_ERROR(CheckHostPort(p->coordinator, "--coordinator"));
  } else if (std::optional<std::string> address = flags.Get("data-parallel-address")) {
    ASSIGN_OR_RETURN(int64_t rpc_port,
                     flags.GetInt("data-parallel-rpc-port", kVllmDataParallelRpcPort, 1, 65535));
    p->coordinator = absl::StrCat(*address, ":", rpc_port);
    RETURN_IF_ERROR(CheckHostPort(p->coordinator, "--data-parallel-address with its rpc port"));
  } else if (std::optional<std::string> leader = getenv("LWS_LEADER_ADDRESS")) {
    p->coordinator = absl::StrCat(*leader, ":", port);
    RETURN_IF_ERROR(CheckHostPort(p->coordinator, "LWS_LEADER_ADDRESS with --coordinator-port"));
  } else if (p->num_nodes == 1) {
    p->coordinator = absl::StrCat("127.0.0.1:", port);  // all ranks in this process
    // No address or port asked for: the serve command takes an ephemeral port instead, so two
    // such servers on one host never race for this one.
    p->coordinator_defaulted = !flags.Has("coordinator-port");
  }
  if (!p->multi_rank()) {
    p->coordinator.clear();  // one rank: no network
  } else if (p->coordinator.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--world-size ", p->world_size,
                     " over several processes needs --coordinator host:port (rank 0's address) or "
                     "LWS_LEADER_ADDRESS"));
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<FlagSpec>& ParallelFlagSpecs() {
  static const std::vector<FlagSpec> specs = {
      {"world-size", true,
       "ranks in the group, all processes: --tensor-parallel-size x data-parallel groups "
       "(default 1)"},
      {"rank", true, "global rank of this process's first rank (default node-rank × local-ranks)"},
      {"coordinator", true,
       "host:port where rank 0 listens for the rendezvous (default LWS_LEADER_ADDRESS)"},
      {"coordinator-port", true, "port used with LWS_LEADER_ADDRESS / one node (default 29500)"},
      {"node-rank", true, "this process's index among --num-nodes (default LWS_WORKER_INDEX)"},
      {"num-nodes", true, "processes in the group (default LWS_GROUP_SIZE)"},
      {"local-ranks", true, "data-parallel ranks (engine loops) in this process (default 1)"},
      {"collective-timeout-s", true,
       "seconds before a silent peer fails a collective and the process exits (default 60)"},
      {"rendezvous-timeout-s", true, "seconds to wait for all ranks to connect (default 600)"},
      {"expert-placement", true,
       "JSON file: which ranks hold which experts, redundant replicas (default even split)"},
      {"tensor-parallel-size", true,
       "T ranks hold one copy of the model (heads, MLP columns, vocabulary split; experts "
       "spread); alone: T threads of this process; with --world-size T --rank R: one process "
       "per rank, rank 0 serves; a world of D x T ranks runs D data-parallel groups, the "
       "experts spread over all ranks, each group's first rank serves (default 1)"},
      {"tp-size", true, "SGLang's name for --tensor-parallel-size"},
      {"decode-context-parallel-size", true,
       "C ranks of the tensor-parallel group split each sequence's latent cache by position, "
       "so a sequence holds C times one rank's cache (C divides --tensor-parallel-size; "
       "default 1)"},
      {"dcp-size", true, "SGLang's name for --decode-context-parallel-size"},
      {"replicas", true,
       "independent copies of the whole model in this process, least-loaded routing (default 1;"
       " not with --world-size/--local-ranks)"},
      // vLLM's data-parallel flags (a ported `vllm serve` line), meaning the ones above.
      {"data-parallel-size", true,
       "vLLM's: data-parallel groups of --tensor-parallel-size ranks each (world size D x T; "
       "all local unless --data-parallel-size-local)"},
      {"data-parallel-size-local", true,
       "vLLM's: data-parallel groups in this process (--local-ranks D x T)"},
      {"data-parallel-start-rank", true,
       "vLLM's: this process's first data-parallel group (--rank S x T)"},
      {"data-parallel-address", true,
       "vLLM's: rank 0's host; with --data-parallel-rpc-port (default 29550) as --coordinator"},
      {"data-parallel-rpc-port", true, "vLLM's: the port of --data-parallel-address"},
      {"enable-expert-parallel", false,
       "vLLM's: accepted; Strata always spreads the experts over all ranks"},
  };
  return specs;
}

std::string ParallelEnvHelp() {
  return "\nmulti-rank environment (Kubernetes LeaderWorkerSet; flags win):\n"
         "  LWS_LEADER_ADDRESS   coordinator host (port: --coordinator-port)\n"
         "  LWS_WORKER_INDEX     --node-rank\n"
         "  LWS_GROUP_SIZE       --num-nodes\n";
}

absl::StatusOr<ParallelOptions> ParallelOptionsFromFlags(const Flags& flags,
                                                         const GetEnv& getenv_or_null) {
  const GetEnv getenv = getenv_or_null ? getenv_or_null : GetEnv(ProcessEnv);
  ParallelOptions p;
  ASSIGN_OR_RETURN(const std::string tp_flag, flags.NameOrAlias("tensor-parallel-size", "tp-size"));
  ASSIGN_OR_RETURN(int64_t tp_size, flags.GetInt(tp_flag, 1, 1, kMaxRanks));
  RETURN_IF_ERROR(ResolveLayout(flags, getenv, tp_size, &p));
  p.tensor_parallel_size = static_cast<int>(tp_size);
  const bool layout_given = flags.Has("world-size") || flags.Has("data-parallel-size") ||
                            flags.Has("local-ranks") || flags.Has("data-parallel-size-local") ||
                            flags.Has("num-nodes") || getenv("LWS_GROUP_SIZE").has_value();
  if (p.tensor_parallel() && !layout_given) {  // the whole group in this process
    p.world_size = p.local_ranks = p.tensor_parallel_size;
  }
  ASSIGN_OR_RETURN(const std::string dcp_flag,
                   flags.NameOrAlias("decode-context-parallel-size", "dcp-size"));
  ASSIGN_OR_RETURN(int64_t dcp_size, flags.GetInt(dcp_flag, 1, 1, kMaxRanks));
  p.decode_context_parallel_size = static_cast<int>(dcp_size);
  if (tp_size % dcp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", dcp_flag, " ", dcp_size, " must divide --", tp_flag, " ", tp_size,
        " (the ranks splitting each sequence's cache are ranks of one tensor-parallel group)"));
  }
  if (p.world_size % p.tensor_parallel_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a world of ", p.world_size, " ranks cannot be cut into tensor-parallel groups of --",
        tp_flag, " ", p.tensor_parallel_size,
        " (the world size is the tensor-parallel size times the number of data-parallel "
        "groups)"));
  }
  if (p.local_ranks % p.tensor_parallel_size != 0 && p.tensor_parallel_size % p.local_ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        p.local_ranks, " ranks per process with --", tp_flag, " ", p.tensor_parallel_size,
        ": a process runs whole tensor-parallel groups or a part of one (its ranks "
        "per process must be a multiple or a divisor of the tensor-parallel size)"));
  }
  RETURN_IF_ERROR(ResolveCoordinator(flags, getenv, &p));
  ASSIGN_OR_RETURN(std::optional<double> timeout,
                   flags.GetDouble("collective-timeout-s", 0.001, 86400.0));
  p.collective_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(timeout.value_or(60) * 1e3));
  ASSIGN_OR_RETURN(std::optional<double> rendezvous,
                   flags.GetDouble("rendezvous-timeout-s", 0.001, 86400.0));
  p.rendezvous_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(rendezvous.value_or(600) * 1e3));
  p.expert_placement_file = flags.GetOr("expert-placement", "");
  ASSIGN_OR_RETURN(int64_t replicas, flags.GetInt("replicas", 1, 1, kMaxRanks));
  p.replicas = static_cast<int>(replicas);
  if (p.replicas > 1 && p.tensor_parallel()) {
    return absl::InvalidArgumentError(absl::StrCat("--replicas ", p.replicas, " and --", tp_flag,
                                                   " ", p.tensor_parallel_size,
                                                   " cannot be combined (replicas are whole "
                                                   "copies of the model on one rank each)"));
  }
  if (p.replicas > 1 && p.multi_rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replicas ", p.replicas,
                     " copies the whole model per engine loop; it cannot be combined ",
                     "with --world-size ", p.world_size, " (expert parallelism across ranks)"));
  }
  return p;
}

}  // namespace strata::cli
