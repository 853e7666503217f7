// The flags of `strata serve` (also read by `strata run-batch`, which runs the same engine
// without the network): their table and their reading into ServeOptions (serve_runtime.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/cli/flags.h"
#include "server/cli/serve_runtime.h"

namespace strata::cli {

// The serve flags, vLLM's that it understands, and the multi-rank ones (parallel_flags.h).
const std::vector<FlagSpec>& ServeFlags();

// Every serve flag read and checked (InvalidArgument naming the flag and its limit); sets the
// process-wide log level and format and the CPU matmul precision as a side effect.
absl::StatusOr<ServeOptions> ServeOptionsFromFlags(const Flags& flags);

}  // namespace strata::cli
