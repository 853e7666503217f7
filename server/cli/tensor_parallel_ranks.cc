#include "server/cli/tensor_parallel_ranks.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "dist/rendezvous.h"
#include "dist/tensor_parallel_group.h"
#include "server/cli/serve_ranks.h"

namespace strata::cli {
namespace {

constexpr int kMaxTensorParallelSize = 64;

}  // namespace

FlagSpec TensorParallelSizeFlag() {
  return {"tensor-parallel-size", true,
          "T ranks (threads) hold one copy of the model: heads, MLP columns and vocabulary split "
          "T ways, experts spread (default 1)"};
}
FlagSpec TpSizeFlag() { return {"tp-size", true, "SGLang's name for --tensor-parallel-size"}; }

FlagSpec DecodeContextParallelSizeFlag() {
  return {"decode-context-parallel-size", true,
          "C ranks of the tensor-parallel group split each sequence's latent cache by position "
          "(C divides --tensor-parallel-size; default 1)"};
}
FlagSpec DcpSizeFlag() {
  return {"dcp-size", true, "SGLang's name for --decode-context-parallel-size"};
}

namespace {

// A size flag with an alias (`--name` or `--alias`, not both), in [1, kMaxTensorParallelSize].
absl::StatusOr<int> SizeFlag(const Flags& flags, const std::string& name,
                             const std::string& alias) {
  ASSIGN_OR_RETURN(const std::string given, flags.NameOrAlias(name, alias));
  ASSIGN_OR_RETURN(int64_t size, flags.GetInt(given, 1, 1, kMaxTensorParallelSize));
  return static_cast<int>(size);
}

}  // namespace

absl::StatusOr<int> TensorParallelSizeFromFlags(const Flags& flags) {
  return SizeFlag(flags, "tensor-parallel-size", "tp-size");
}

absl::StatusOr<int> DecodeContextParallelSizeFromFlags(const Flags& flags) {
  return SizeFlag(flags, "decode-context-parallel-size", "dcp-size");
}

absl::Status RunTensorParallelRanks(const std::string& dir, const engine::ModelLoadOptions& load,
                                    int size, const TensorParallelBody& body) {
  std::vector<std::unique_ptr<engine::Model>> shards(static_cast<size_t>(size));
  std::vector<absl::Status> status(static_cast<size_t>(size));
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        engine::ModelLoadOptions options = load;
        options.tensor_parallel = {r, size};
        absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(dir, options);
        if (model.ok()) {
          shards[static_cast<size_t>(r)] = *std::move(model);
        } else {
          status[static_cast<size_t>(r)] = model.status();
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);

  ParallelOptions parallel;
  parallel.world_size = size;
  parallel.local_ranks = size;
  // The store on an ephemeral loopback port, up while rank 0's communicator lives.
  ASSIGN_OR_RETURN(const dist::LocalCoordinator coordinator, dist::StartLocalCoordinator());
  parallel.coordinator = coordinator.address;
  ASSIGN_OR_RETURN(
      std::vector<std::unique_ptr<dist::Communicator>> comms,
      ConnectEachLocalRank(parallel, "strata-tensor-parallel", "the tensor-parallel group",
                           HostLocalOrGloo(parallel, "the tensor-parallel group")));
  std::vector<std::unique_ptr<dist::CommunicatorTensorParallelGroup>> groups;
  for (auto& comm : comms) {
    groups.push_back(std::make_unique<dist::CommunicatorTensorParallelGroup>(comm.get()));
  }
  // C < T: the context-parallel groups' own communicators.
  const int cp_size = load.decode_context_parallel_size;
  ContextParallelGroups cp;
  if (cp_size > 1 && cp_size < size) {
    ASSIGN_OR_RETURN(cp,
                     ConnectContextParallelGroups(
                         parallel, size, cp_size, "strata-context-parallel",
                         HostLocalOrGloo(parallel, "the context-parallel group", cp_size), groups));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      status[static_cast<size_t>(r)] =
          body(r, *shards[static_cast<size_t>(r)], groups[static_cast<size_t>(r)].get());
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

}  // namespace strata::cli
