// `strata bench --device cuda --tensor-parallel-size T [--decode-context-parallel-size C]`: the
// engine benchmark on T GPUs of this process (rank r on GPU r, threads over the group): rank 0
// runs the benchmark's requests, the other ranks follow its steps on their shards. Their
// collectives are on each rank's compute stream (NCCL on GPUs; on the CUDA emulator host
// functions over the host group) and decode steps are CUDA graphs on every rank, as in `serve`.
//
// After the run every rank measures the group's all-reduce bus bandwidth with the same
// collectives captured in a CUDA graph: at the decode step's message size (batch · hidden f32,
// what every mixer and FFN all-reduces) and at 64 MiB (the bandwidth regime NCCL's
// all_reduce_perf reports). The report puts the decode step's all-reduces at the first rate next
// to the measured decode step.
#pragma once

#if defined(STRATA_HAVE_CUDA)

#include <string>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "nlohmann/json.hpp"
#include "server/bench/engine_bench.h"

namespace strata::cli {

// The benchmark's report (RunEngineBench's fields) with "tensor_parallel" describing the
// group's collectives. Errors: those of loading the shards (head counts T does not divide),
// fewer GPUs than T, a communicator that cannot connect.
absl::StatusOr<nlohmann::ordered_json> RunCudaTensorParallelBench(
    const std::string& dir, const engine::ModelLoadOptions& load, int tp_size,
    const bench::EngineBenchOptions& options);

}  // namespace strata::cli

#endif  // STRATA_HAVE_CUDA
