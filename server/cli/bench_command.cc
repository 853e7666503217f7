// `strata bench`: end-to-end prefill and decode tokens/s through the real engine (scheduler +
// executor + model), like llama-bench, each next to its roofline floor measured in the same
// run (docs/performance.md; the measurement itself is server/bench/engine_bench.h).
#include <omp.h>

#include <cstdio>
#include <iostream>

#include "core/log.h"
#include "core/status.h"
#include "engine/executor.h"
#include "engine/model.h"
#include "server/bench/engine_bench.h"
#include "server/cli/commands.h"
#include "server/cli/default_model.h"
#include "server/cli/flags.h"
#include "server/cli/tensor_parallel_ranks.h"

#if defined(STRATA_HAVE_CUDA)
#include "server/bench/engine_bench_cuda.h"
#include "server/cli/bench_cuda_ranks.h"
#endif

namespace strata::cli {
namespace {

const std::vector<FlagSpec> kBenchFlags = {
    {"model", true, "checkpoint directory (default: the embedded demo model)"},
    {"prompt-tokens", true, "prompt length per sequence (default 512)"},
    {"gen-tokens", true, "generated tokens per sequence (default 128)"},
    {"batch", true, "concurrent sequences (default 1)"},
    {"max-num-batched-tokens", true,
     "token budget of one step, so the prefill chunk of a long prompt (default 2048, as serve; "
     "at least --batch)"},
    {"temperature", true,
     "sample every token at this temperature, each sequence with its own seed (default 0: "
     "greedy); vLLM's throughput benchmark samples at 1.0"},
    {"top-p", true, "with --temperature: nucleus sampling, (0, 1] (default 1: off)"},
    {"top-k", true, "with --temperature: the k most likely tokens only (default 0: off)"},
    {"threads", true, "OpenMP threads (default: all cores)"},
    {"device", true, "cpu | cuda (default cpu)"},
    {"kv-cache-dtype", true, kKvCacheDTypeHelp},
    {"cpu-matmul-precision", true, kCpuMatmulPrecisionHelp},
    {"quantization", true, kQuantizationHelp},
    {"mmap-weights", false,
     "cpu: read the weights from the memory-mapped checkpoint instead of a copy on huge pages"},
    TensorParallelSizeFlag(),
    TpSizeFlag(),
    DecodeContextParallelSizeFlag(),
    DcpSizeFlag(),
    {"json", false, "print one JSON object instead of a table"},
};

// What the tensor-parallel collectives cost the lead rank over the run, next to what the
// sharding implies per token (engine/tensor_parallel.h): two all-reduces of the hidden row per
// layer (after the mixer and after the FFN; LatentMoE adds one of its latent row) in f32 on the
// CPU and one for the embedding, averaged over the layers; the logits are gathered once per
// sampled row (reported apart).
nlohmann::ordered_json CollectiveReport(const dist::CommunicatorTensorParallelGroup::Stats& s,
                                        const engine::ModelConfig& cfg,
                                        const nlohmann::ordered_json& report) {
  // Tokens through the forward: every prompt token and every generated one but the last.
  const double tokens =
      (report["prompt_tokens"].get<double>() + report["gen_tokens"].get<double>() - 1.0) *
      report["batch"].get<double>();
  const double per_token_per_layer =
      tokens > 0 ? static_cast<double>(s.all_reduce_bytes) / tokens / cfg.num_layers : 0.0;
  double planned = 4.0 * cfg.hidden_size * (2 * cfg.num_layers + 1);  // mixers, FFNs, embedding
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.IsMoe(l) && cfg.moe.is_latent()) planned += 4.0 * cfg.moe.routed_expert_hidden_size;
  }
  return {{"tensor_parallel_size", report["tensor_parallel_size"]},
          {"collective_seconds", s.seconds},
          {"all_reduces", s.all_reduces},
          {"all_reduce_bytes", s.all_reduce_bytes},
          {"all_gathers", s.all_gathers},
          {"all_gather_bytes", s.all_gather_bytes},
          {"all_to_alls", s.all_to_alls},  // decode context parallelism with C = T
          {"all_to_all_bytes", s.all_to_all_bytes},
          {"step_broadcast_bytes", s.broadcast_bytes},
          {"all_reduce_bytes_per_token_per_layer", per_token_per_layer},
          {"planned_all_reduce_bytes_per_token_per_layer", planned / cfg.num_layers}};
}

// Decode context parallelism over C < T ranks: what the lead's context-parallel group moved
// (the MLA layers' query all-gathers and partials' all-to-alls).
nlohmann::ordered_json ContextParallelReport(const dist::CommunicatorTensorParallelGroup::Stats& s,
                                             int cp_size) {
  return {{"decode_context_parallel_size", cp_size},
          {"collective_seconds", s.seconds},
          {"all_gathers", s.all_gathers},
          {"all_gather_bytes", s.all_gather_bytes},
          {"all_to_alls", s.all_to_alls},
          {"all_to_all_bytes", s.all_to_all_bytes}};
}

absl::StatusOr<bench::EngineBackend> MakeBackend(const std::string& device,
                                                 const engine::Model& model,
                                                 const bench::EngineBenchOptions& options) {
  if (device == "cpu") return bench::CpuEngineBackend(model, options);
  if (device != "cuda") {
    return absl::InvalidArgumentError("--device must be cpu or cuda, got '" + device + "'");
  }
#if defined(STRATA_HAVE_CUDA)
  return bench::CudaEngineBackend(model, options);
#else
  return absl::FailedPreconditionError("--device cuda: this strata was built without CUDA");
#endif
}

absl::Status RunBench(const Flags& flags) {
  bench::EngineBenchOptions options;
  ASSIGN_OR_RETURN(options.prompt_tokens, flags.GetInt("prompt-tokens", 512, 1, 1 << 20));
  ASSIGN_OR_RETURN(options.gen_tokens, flags.GetInt("gen-tokens", 128, 2, 1 << 20));
  ASSIGN_OR_RETURN(int64_t batch, flags.GetInt("batch", 1, 1, 4096));
  options.batch = static_cast<int>(batch);
  ASSIGN_OR_RETURN(options.max_num_batched_tokens,
                   flags.GetInt("max-num-batched-tokens",
                                scheduler::SchedulerConfig{}.max_num_batched_tokens, 1, 1 << 24));
  ASSIGN_OR_RETURN(std::optional<double> temperature, flags.GetDouble("temperature", 0, 100));
  ASSIGN_OR_RETURN(std::optional<double> top_p, flags.GetDouble("top-p", 1e-6, 1));
  ASSIGN_OR_RETURN(int64_t top_k, flags.GetInt("top-k", 0, 0, 1 << 30));
  options.temperature = static_cast<float>(temperature.value_or(0.0));
  options.top_p = static_cast<float>(top_p.value_or(1.0));
  options.top_k = static_cast<int>(top_k);
  ASSIGN_OR_RETURN(int64_t threads, flags.GetInt("threads", 0, 0, 1024));
  if (threads > 0) omp_set_num_threads(static_cast<int>(threads));
  const bool json = flags.Has("json");
  if (json) log::SetLevel(log::Level::kWarn);
  RETURN_IF_ERROR(ApplyCpuMatmulPrecision(flags.GetOr("cpu-matmul-precision", "f32")));
  ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(flags.GetOr("model", "")));
  const std::string device = flags.GetOr("device", "cpu");
  ASSIGN_OR_RETURN(options.latent_dtype,
                   ParseKvCacheDType(flags.GetOr("kv-cache-dtype", "auto"), device));
  engine::ModelLoadOptions load;
  load.copy_weights = device == "cpu" && !flags.Has("mmap-weights");
  ASSIGN_OR_RETURN(load.quantization,
                   engine::ParseWeightQuantization(flags.GetOr("quantization", "")));
  ASSIGN_OR_RETURN(const int tp_size, TensorParallelSizeFromFlags(flags));
  ASSIGN_OR_RETURN(load.decode_context_parallel_size, DecodeContextParallelSizeFromFlags(flags));
  if (tp_size > 1 && device == "cuda") {
#if defined(STRATA_HAVE_CUDA)
    ASSIGN_OR_RETURN(nlohmann::ordered_json report,
                     RunCudaTensorParallelBench(dir, load, tp_size, options));
    if (json) {
      std::cout << report.dump() << std::endl;
      return absl::OkStatus();
    }
    const nlohmann::ordered_json& t = report["tensor_parallel"];
    std::printf(
        "tensor parallel %d on the device (%s): prefill %.1f tok/s, decode %.1f tok/s\n"
        "all-reduce bus bandwidth in a CUDA graph: %.2f GB/s at the decode step's %lld bytes, "
        "%.2f GB/s at %lld bytes; the decode step's %lld all-reduces ~%.3f ms of its %.3f ms\n",
        tp_size, t["collectives"].get<std::string>().c_str(),
        report["prefill_tokens_per_s"].get<double>(), report["decode_tokens_per_s"].get<double>(),
        t["decode_message_bus_gb_s"].get<double>(),
        static_cast<long long>(t["decode_message_bytes"].get<int64_t>()),
        t["large_message_bus_gb_s"].get<double>(),
        static_cast<long long>(t["large_message_bytes"].get<int64_t>()),
        static_cast<long long>(t["all_reduces_per_decode_step"].get<int64_t>()),
        t["decode_step_all_reduce_ms"].get<double>(), t["decode_step_ms"].get<double>());
    return absl::OkStatus();
#else
    return absl::FailedPreconditionError("--device cuda: this strata was built without CUDA");
#endif
  }
  if (tp_size > 1) {
    if (device != "cpu") {
      return absl::InvalidArgumentError("--device must be cpu or cuda, got '" + device + "'");
    }
    // Rank 0 runs the benchmark; the others follow its steps on their shards.
    return RunTensorParallelRanks(
        dir, load, tp_size,
        [&](int rank, const engine::Model& model,
            dist::CommunicatorTensorParallelGroup* group) -> absl::Status {
          engine::ForwardContext context;
          context.tensor_parallel = group;
          if (rank != 0) {
            engine::CpuExecutor follower(
                model, bench::EngineBenchLayout(
                           engine::CacheSpecFor(model.config(),
                                                options.latent_dtype.value_or(LatentDType::kF32)),
                           options));
            follower.set_forward_context(context);
            while (follower.FollowStep() >= 0) {
            }
            return absl::OkStatus();
          }
          ASSIGN_OR_RETURN(bench::EngineBackend backend, MakeBackend(device, model, options));
          auto* lead = static_cast<engine::CpuExecutor*>(backend.executor.get());
          lead->set_forward_context(context);
          absl::StatusOr<nlohmann::ordered_json> report =
              bench::RunEngineBench(model, dir, backend, options);
          lead->EndFollowers();  // also after an error: the followers must not wait forever
          if (!report.ok()) return report.status();
          (*report)["tensor_parallel_size"] = tp_size;
          (*report)["tensor_parallel"] = CollectiveReport(group->stats(), model.config(), *report);
          if (const auto* cp = dynamic_cast<const dist::CommunicatorTensorParallelGroup*>(
                  group->context_parallel());
              cp != nullptr) {
            (*report)["tensor_parallel"]["context_parallel_group"] =
                ContextParallelReport(cp->stats(), load.decode_context_parallel_size);
          }
          if (json) {
            std::cout << report->dump() << std::endl;
          } else {
            bench::PrintEngineBenchTable(*report, backend);
            const nlohmann::ordered_json& c = (*report)["tensor_parallel"];
            std::printf(
                "tensor parallel %d: %.3f s in collectives (%lld all-reduces, %lld all-gathers); "
                "all-reduce %.0f bytes per token per layer (plan: %.0f)\n",
                tp_size, c["collective_seconds"].get<double>(),
                static_cast<long long>(c["all_reduces"].get<int64_t>()),
                static_cast<long long>(c["all_gathers"].get<int64_t>()),
                c["all_reduce_bytes_per_token_per_layer"].get<double>(),
                c["planned_all_reduce_bytes_per_token_per_layer"].get<double>());
            if (c.contains("context_parallel_group")) {
              const nlohmann::ordered_json& g = c["context_parallel_group"];
              std::printf(
                  "context-parallel groups of %d: %.3f s in collectives (%lld all-gathers, %lld "
                  "all-to-alls, %lld bytes)\n",
                  g["decode_context_parallel_size"].get<int>(),
                  g["collective_seconds"].get<double>(),
                  static_cast<long long>(g["all_gathers"].get<int64_t>()),
                  static_cast<long long>(g["all_to_alls"].get<int64_t>()),
                  static_cast<long long>(g["all_gather_bytes"].get<int64_t>() +
                                         g["all_to_all_bytes"].get<int64_t>()));
            }
          }
          return absl::OkStatus();
        });
  }
  ASSIGN_OR_RETURN(auto model, engine::Model::Load(dir, load));
  ASSIGN_OR_RETURN(bench::EngineBackend backend, MakeBackend(device, *model, options));
  ASSIGN_OR_RETURN(nlohmann::ordered_json report,
                   bench::RunEngineBench(*model, dir, backend, options));
  if (json) {
    std::cout << report.dump() << std::endl;
  } else {
    bench::PrintEngineBenchTable(report, backend);
  }
  return absl::OkStatus();
}

}  // namespace

const CommandSpec& BenchSpec() {
  static const CommandSpec spec{
      .program = "strata",
      .command = "bench",
      .description = "prefill and decode tokens/s through the engine, next to the roofline floor",
      .flags = kBenchFlags};
  return spec;
}

int BenchCommand(const std::vector<std::string>& args) {
  return RunCommand(BenchSpec(), args, RunBench);
}

}  // namespace strata::cli
