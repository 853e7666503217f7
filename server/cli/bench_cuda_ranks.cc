#include "server/cli/bench_cuda_ranks.h"

#if defined(STRATA_HAVE_CUDA)

#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "dist/rendezvous.h"
#include "engine/cuda/cuda_executor.h"
#include "engine/cuda/device_collectives.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"
#include "server/bench/engine_bench_cuda.h"
#include "server/cli/serve_ranks.h"
#include "server/cli/tensor_parallel_ranks.h"

#if !defined(STRATA_CUDA_EMU)
#include "dist/nccl_communicator.h"
#endif

namespace strata::cli {
namespace {

namespace ec = engine::cuda;
namespace kc = kernels::cuda;

#if defined(STRATA_CUDA_EMU)
constexpr int64_t kLargeMessageBytes = int64_t{4} << 20;  // the emulator moves host memory
constexpr int kGraphReps = 4;
#else
constexpr int64_t kLargeMessageBytes = int64_t{64} << 20;
constexpr int kGraphReps = 20;
#endif

// The group's all-reduce bus bandwidth (GB/s, NCCL's definition: bytes · 2(n − 1)/n per
// second) for messages of `bytes`: kGraphReps all-reduces captured in one CUDA graph on a stream
// of `device`, replayed once to warm up, then timed. Every rank of `c` calls it at once.
absl::StatusOr<double> GraphAllReduceBusGBps(ec::DeviceCollectives& c, int device, int64_t bytes) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                              "cudaStreamCreate (all-reduce bandwidth)");
  std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> owned(
      stream, [](cudaStream_t s) { cudaStreamDestroy(s); });
  ASSIGN_OR_RETURN(kc::DeviceBuffer buffer,
                   kc::DeviceBuffer::Allocate(bytes, "the all-reduce bandwidth buffer"));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(buffer.get(), 0, static_cast<size_t>(bytes), stream),
                              "all-reduce bandwidth cudaMemsetAsync");
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed),
                              "cudaStreamBeginCapture (all-reduce bandwidth)");
  absl::Status recorded;
  for (int i = 0; i < kGraphReps && recorded.ok(); ++i) {
    recorded = c.AllReduceSum(buffer.as<float>(), bytes / 4, stream);
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  RETURN_IF_ERROR(recorded);
  STRATA_CUDA_RETURN_IF_ERROR(ended, "cudaStreamEndCapture (all-reduce bandwidth)");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  STRATA_CUDA_RETURN_IF_ERROR(made, "cudaGraphInstantiate (all-reduce bandwidth)");
  std::unique_ptr<CUgraphExec_st, void (*)(cudaGraphExec_t)> owned_exec(
      exec, [](cudaGraphExec_t e) { cudaGraphExecDestroy(e); });
  STRATA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  RETURN_IF_ERROR(c.Synchronize(stream));
  const auto start = std::chrono::steady_clock::now();
  STRATA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  RETURN_IF_ERROR(c.Synchronize(stream));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kGraphReps;
  const int n = c.size();
  return static_cast<double>(bytes) * 2.0 * (n - 1) / n / seconds / 1e9;
}

// All-reduces of the hidden row in one forward: the embedding's, every mixer's and FFN's, and
// LatentMoE's latent sum in each MoE layer (CudaModel; engine/parallel_plan.h counts the same).
struct AllReducesPerStep {
  int64_t hidden = 0;  // of hidden_size floats per row
  int64_t latent = 0;  // of the latent width per row
};
AllReducesPerStep CountAllReduces(const engine::ModelConfig& cfg) {
  AllReducesPerStep a{1 + 2 * int64_t{cfg.num_layers}, 0};
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.IsMoe(l) && cfg.moe.is_latent()) ++a.latent;
  }
  return a;
}

}  // namespace

absl::StatusOr<nlohmann::ordered_json> RunCudaTensorParallelBench(
    const std::string& dir, const engine::ModelLoadOptions& load, int tp_size,
    const bench::EngineBenchOptions& options) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < tp_size) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("--device cuda --tensor-parallel-size ",
                                                      tp_size, " runs one rank per GPU: ", devices,
                                                      " GPU(s) visible"));
  }
  const int cp_size = load.decode_context_parallel_size;
  const size_t n = static_cast<size_t>(tp_size);
  std::vector<std::unique_ptr<ec::DeviceCollectives>> collectives(n), cp_collectives(n);
#if !defined(STRATA_CUDA_EMU)
  // NCCL groups of the ranks (and of each context-parallel group when C < T), one GPU each.
  ParallelOptions nccl;
  nccl.world_size = nccl.local_ranks = tp_size;
  ASSIGN_OR_RETURN(const dist::LocalCoordinator coordinator, dist::StartLocalCoordinator());
  nccl.coordinator = coordinator.address;
  auto connect = [](const dist::RendezvousOptions& o, int local_rank) {
    return dist::ConnectNccl(o, local_rank);
  };
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<dist::Communicator>> comms,
                   ConnectEachLocalRank(nccl, "strata-bench-nccl", "the NCCL group", connect));
  std::vector<std::unique_ptr<dist::Communicator>> cp_comms;
  if (cp_size > 1 && cp_size < tp_size) {
    ASSIGN_OR_RETURN(cp_comms,
                     ConnectEachLocalRank(nccl, "strata-bench-cp-nccl",
                                          "the NCCL context-parallel group", connect, cp_size));
  }
  for (size_t r = 0; r < n; ++r) {
    collectives[r] = dist::NcclDeviceCollectives(comms[r].get());
    if (!cp_comms.empty()) cp_collectives[r] = dist::NcclDeviceCollectives(cp_comms[r].get());
  }
#endif

#if defined(STRATA_CUDA_EMU)
  constexpr bool host_collectives = true;
#else
  constexpr bool host_collectives = false;
#endif
  nlohmann::ordered_json report;
  std::mutex mu;                                   // the lead's report and the ranks' bandwidths
  double decode_bus_gbps = 0, large_bus_gbps = 0;  // as rank 0 measured them
  std::vector<int64_t> graph_replays(n, 0);        // decode steps each rank ran as a CUDA graph
  engine::ModelConfig cfg;  // rank 0's (the shards' hidden width and layers are the model's)
  RETURN_IF_ERROR(RunTensorParallelRanks(
      dir, load, tp_size,
      [&](int rank, const engine::Model& model,
          dist::CommunicatorTensorParallelGroup* group) -> absl::Status {
        const size_t r = static_cast<size_t>(rank);
        if (host_collectives) {  // device memory is host memory: host functions on the stream
          collectives[r] = std::make_unique<ec::HostFunctionCollectives>(group);
          if (group->context_parallel() != nullptr) {
            cp_collectives[r] =
                std::make_unique<ec::HostFunctionCollectives>(group->context_parallel());
          }
        }
        ec::CudaExecutorOptions executor;
        executor.device = rank;
        executor.model.tensor_parallel = collectives[r].get();
        executor.model.context_parallel = cp_collectives[r].get();
        executor.tensor_parallel_host = group;
        ASSIGN_OR_RETURN(bench::EngineBackend backend,
                         bench::CudaEngineBackend(model, options, executor));
        auto* cuda = static_cast<ec::CudaExecutor*>(backend.executor.get());
        if (rank == 0) {
          absl::StatusOr<nlohmann::ordered_json> run =
              bench::RunEngineBench(model, dir, backend, options);
          cuda->EndFollowers();  // also after an error: the followers must not wait forever
          if (!run.ok()) return run.status();
          std::lock_guard<std::mutex> lock(mu);
          report = *std::move(run);
          cfg = model.config();
        } else {
          while (cuda->FollowStep() >= 0) {
          }
        }
        // Every rank at once: the all-reduce bus bandwidth in a graph, at the decode step's
        // message (batch rows of the hidden width, f32) and at the large message.
        const int64_t decode_message = int64_t{options.batch} * model.config().hidden_size * 4;
        ASSIGN_OR_RETURN(const double small,
                         GraphAllReduceBusGBps(*collectives[r], rank, decode_message));
        ASSIGN_OR_RETURN(const double large,
                         GraphAllReduceBusGBps(*collectives[r], rank, kLargeMessageBytes));
        std::lock_guard<std::mutex> lock(mu);
        graph_replays[r] = cuda->graph_replays();
        if (rank == 0) {
          decode_bus_gbps = small;
          large_bus_gbps = large;
        }
        return absl::OkStatus();
      }));

  // The decode step's all-reduces at the rate measured for their size, against the step.
  const AllReducesPerStep count = CountAllReduces(cfg);
  const int64_t rows = options.batch;
  const double ring = 2.0 * (tp_size - 1) / tp_size;
  const double step_bus_bytes =
      ring * 4.0 * rows *
      (static_cast<double>(count.hidden) * cfg.hidden_size +
       static_cast<double>(count.latent) * cfg.moe.routed_expert_hidden_size);
  const double decode_tps = report.value("decode_tokens_per_s", 0.0);
  const double step_ms = decode_tps > 0 ? 1e3 * static_cast<double>(rows) / decode_tps : 0.0;
  const double all_reduce_ms =
      decode_bus_gbps > 0 ? step_bus_bytes / (decode_bus_gbps * 1e9) * 1e3 : 0.0;
  report["tensor_parallel_size"] = tp_size;
  report["tensor_parallel"] = {
    {"tensor_parallel_size", tp_size},
    {"decode_context_parallel_size", cp_size},
#if defined(STRATA_CUDA_EMU)
    {"collectives", "host functions on the stream (CUDA emulator)"},
#else
    {"collectives", "nccl on the compute stream"},
#endif
    {"graph_replays_per_rank", graph_replays},
    {"all_reduces_per_decode_step", count.hidden + count.latent},
    {"decode_message_bytes", rows * cfg.hidden_size * 4},
    {"decode_message_bus_gb_s", decode_bus_gbps},
    {"large_message_bytes", kLargeMessageBytes},
    {"large_message_bus_gb_s", large_bus_gbps},
    {"decode_step_ms", step_ms},
    {"decode_step_all_reduce_ms", all_reduce_ms},
    {"decode_step_all_reduce_share", step_ms > 0 ? all_reduce_ms / step_ms : 0.0}
  };
  return report;
}

}  // namespace strata::cli

#endif  // STRATA_HAVE_CUDA
