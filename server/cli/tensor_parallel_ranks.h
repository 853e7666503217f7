// `--tensor-parallel-size T` on the one-shot commands (`strata logits`, `strata generate`): T
// threads of this process, each loading its shard of the checkpoint (engine/tensor_parallel.h)
// and joining a Gloo group over loopback, run the same work together.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/tensor_parallel_group.h"
#include "engine/model.h"
#include "server/cli/flags.h"

namespace strata::cli {

// --tensor-parallel-size (vLLM) or --tp-size (SGLang): 1 when neither is given; both given, or
// a value outside [1, 64], is InvalidArgument naming the flags.
absl::StatusOr<int> TensorParallelSizeFromFlags(const Flags& flags);

// --decode-context-parallel-size (vLLM) or --dcp-size (SGLang): 1 when neither is given.
absl::StatusOr<int> DecodeContextParallelSizeFromFlags(const Flags& flags);

// The flag specs, for a command's flag list.
FlagSpec TensorParallelSizeFlag();
FlagSpec TpSizeFlag();
FlagSpec DecodeContextParallelSizeFlag();
FlagSpec DcpSizeFlag();

// Runs body(rank, shard, group) on ranks 0 … size−1 at once (one thread each; `load` with each
// rank's tensor_parallel set) and returns the first error by rank. Load errors (e.g. head counts
// that `size` does not divide) come back before any body runs. With 1 < C < size
// (load.decode_context_parallel_size) each group carries its C-rank context-parallel group.
using TensorParallelBody = std::function<absl::Status(
    int rank, const engine::Model& model, dist::CommunicatorTensorParallelGroup* group)>;
absl::Status RunTensorParallelRanks(const std::string& dir, const engine::ModelLoadOptions& load,
                                    int size, const TensorParallelBody& body);

}  // namespace strata::cli
