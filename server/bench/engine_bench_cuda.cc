#include "server/bench/engine_bench_cuda.h"

#include <cstdio>

#include "core/status.h"
#include "engine/cuda/cuda_executor.h"

namespace strata::bench {

absl::StatusOr<EngineBackend> CudaEngineBackend(const engine::Model& model,
                                                const EngineBenchOptions& options,
                                                const engine::cuda::CudaExecutorOptions& executor) {
  EngineBackend b;
  b.device = "cuda";
  b.layout =
      EngineBenchLayout(engine::cuda::CudaCacheSpecFor(
                            model.config(), options.latent_dtype.value_or(LatentDType::kBF16)),
                        options);
  ASSIGN_OR_RETURN(std::unique_ptr<engine::cuda::CudaExecutor> e,
                   engine::cuda::CudaExecutor::Create(model, executor));
  RETURN_IF_ERROR(e->AllocateCaches(b.layout));
  ASSIGN_OR_RETURN(engine::cuda::DeviceCeilings c, e->MeasureCeilings());
  // A copy's GB/s counts bytes read plus written; DRAM streams reads at about that rate.
  b.read_bytes_per_s = c.copy_gb_s * 1e9;
  b.peak_flops = c.bf16_tflop_s * 1e12;
  b.peak_name = "bf16";
  b.matmul_precision = "bf16";
  char text[128];
  std::snprintf(text, sizeof(text), "device copy %.0f GB/s, cuBLAS bf16 GEMM %.0f TFLOP/s",
                c.copy_gb_s, c.bf16_tflop_s);
  b.ceilings = text;
  b.prefill_chunk_alignment = engine::cuda::kPromptChunkAlignment;
  b.warm_up = true;  // graph capture and module loading stay out of the timed run
  // Kernels per decode step: the largest decode graph's nodes (batch 1 is bound by their count).
  const engine::cuda::CudaExecutor* cuda = e.get();
  const int layers = model.config().num_layers;
  b.annotate = [cuda, layers](nlohmann::ordered_json& report) {
    const size_t nodes = cuda->decode_graph_nodes();
    if (nodes == 0) return;  // no decode step ran as a graph
    report["decode_graph_nodes"] = nodes;
    report["decode_graph_nodes_per_layer"] = layers > 0 ? static_cast<double>(nodes) / layers : 0.0;
  };
  b.executor = std::move(e);
  return b;
}

}  // namespace strata::bench
