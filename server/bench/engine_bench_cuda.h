// The CUDA backend of the engine benchmark (server/bench/engine_bench.h): a CudaExecutor with
// caches sized for the run; ceilings = the device's copy bandwidth and cuBLAS bf16 GEMM rate.
// `executor`: its device and, for one rank of a tensor-parallel group, the group's collectives.
#pragma once

#include "absl/status/statusor.h"
#include "engine/cuda/cuda_executor.h"
#include "server/bench/engine_bench.h"

namespace strata::bench {

absl::StatusOr<EngineBackend> CudaEngineBackend(
    const engine::Model& model, const EngineBenchOptions& options,
    const engine::cuda::CudaExecutorOptions& executor = {});

}  // namespace strata::bench
