#include "server/bench/engine_bench.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "absl/strings/str_format.h"
#include "core/roofline.h"
#include "core/status.h"
#include "kernels/cpu/matmul.h"
#include "scheduler/scheduler.h"

namespace strata::bench {
namespace {

// Weight bytes one decode step must read for `batch` tokens: everything but the routed
// experts, plus the experts the batch is expected to touch (E·(1 − (1 − k/E)^batch)).
// `embed_bytes`: the embedding table's bytes in `total_bytes` that a step does not read (it reads
// one row per token), 0 where the LM head is the same bytes (tied, not quantised apart).
double DecodeWeightBytes(const engine::ModelConfig& cfg, double total_bytes, double embed_bytes,
                         double routed_bytes_per_expert_layer, int batch) {
  const auto& m = cfg.moe;
  int num_moe_layers = 0;
  for (int l = 0; l < cfg.num_layers; ++l) num_moe_layers += cfg.IsMoe(l) ? 1 : 0;
  const double all_routed =
      routed_bytes_per_expert_layer * m.num_experts * static_cast<double>(num_moe_layers);
  const double touched =
      m.num_experts > 0
          ? m.num_experts *
                (1.0 - std::pow(1.0 - double(m.num_experts_per_token) / m.num_experts, batch))
          : 0.0;
  return total_bytes - all_routed - embed_bytes +
         routed_bytes_per_expert_layer * touched * num_moe_layers;
}

struct Measured {
  double prefill_s = 0, decode_s = 0;
  double decode_execute_s = 0;  // of decode_s, inside StepExecutor::Execute (the rest: scheduling)
  int64_t prefill_tokens = 0, decode_tokens = 0;
};

absl::StatusOr<Measured> RunRequests(const engine::Model& model, EngineBackend& backend,
                                     const EngineBenchOptions& o) {
  const kvcache::CacheLayout& layout = backend.layout;
  scheduler::SchedulerConfig config;
  config.max_num_seqs = o.batch;
  config.max_num_batched_tokens = std::max<int64_t>(o.max_num_batched_tokens, o.batch);
  config.max_model_len = o.prompt_tokens + o.gen_tokens;
  config.num_blocks = layout.num_blocks;
  config.num_slots = layout.num_slots;
  config.has_kda_layers = layout.num_kda_layers > 0;
  config.enable_prefix_caching = false;
  config.prefill_chunk_alignment = backend.prefill_chunk_alignment;
  ASSIGN_OR_RETURN(auto sched, scheduler::Scheduler::Create(config));
  std::mt19937 rng(1);
  for (int b = 0; b < o.batch; ++b) {
    scheduler::Request r;
    r.request_id = "bench" + std::to_string(b);
    for (int64_t i = 0; i < o.prompt_tokens; ++i) {
      r.prompt.push_back(static_cast<int32_t>(rng() % model.config().vocab_size));
    }
    r.sampling.temperature = o.temperature;
    r.sampling.top_p = o.top_p;
    r.sampling.top_k = o.top_k;
    r.sampling.seed = static_cast<uint64_t>(b);
    r.max_tokens = o.gen_tokens;
    r.ignore_eos = true;
    RETURN_IF_ERROR(sched->Add(std::move(r)).status());
  }
  Measured m;
  int first_tokens = 0;
  auto start = std::chrono::steady_clock::now();
  bool decoding = false;
  while (sched->HasWork()) {
    engine::StepPlan plan = sched->Schedule();
    const auto execute_start = std::chrono::steady_clock::now();
    engine::StepResult result = backend.executor->Execute(plan);
    if (decoding) {
      m.decode_execute_s +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - execute_start).count();
    }
    for (const auto& e : sched->Commit(result)) {
      if (e.token && e.num_output_tokens == 1) ++first_tokens;
    }
    if (!decoding && first_tokens == o.batch) {  // every prompt is in: prefill done
      m.prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      start = std::chrono::steady_clock::now();
      decoding = true;
    }
  }
  m.decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.prefill_tokens = o.prompt_tokens * o.batch;
  m.decode_tokens = (o.gen_tokens - 1) * o.batch;
  return m;
}

}  // namespace

kvcache::CacheLayout EngineBenchLayout(const kvcache::ModelCacheSpec& spec,
                                       const EngineBenchOptions& o) {
  // Pages for every sequence's prompt and output, one slot each, no checkpoints.
  return kvcache::LayoutWithPools(
      spec, 64, static_cast<int32_t>(o.batch * ((o.prompt_tokens + o.gen_tokens) / 64 + 2)),
      o.batch, 0);
}

absl::StatusOr<EngineBackend> CpuEngineBackend(const engine::Model& model,
                                               const EngineBenchOptions& options) {
  EngineBackend b;
  b.device = "cpu";
  b.layout = EngineBenchLayout(
      engine::CacheSpecFor(model.config(), options.latent_dtype.value_or(LatentDType::kF32)),
      options);
  b.executor = std::make_unique<engine::CpuExecutor>(model, b.layout);
  b.read_bytes_per_s = MeasureReadBandwidth();
  // With bf16 products (--cpu-matmul-precision bf16) the matrix FLOPs may run faster than the
  // f32 FMA peak: at the vdpbf16ps rate (AMD Zen 4/5: about twice) or on AMX tiles (Intel: many
  // times). The compute ceiling is then the higher of the measured peaks; attention and the KDA
  // recurrence run at the f32 rate whatever the precision.
  b.matmul_precision = kernels::cpu::MatmulPrecisionInEffect();
  const double f32_peak = MeasurePeakF32Flops();
  const double bf16_peak = b.matmul_precision == "bf16"       ? MeasurePeakBf16DotFlops()
                           : b.matmul_precision == "bf16-amx" ? MeasurePeakAmxBf16Flops()
                                                              : 0.0;
  b.peak_flops = std::max(f32_peak, bf16_peak);
  b.peak_name = bf16_peak <= f32_peak ? "f32" : b.matmul_precision == "bf16" ? "bf16" : "amx_bf16";
  char text[192];
  std::snprintf(text, sizeof(text), "read bandwidth %.1f GB/s, f32 peak %.1f GFLOP/s",
                b.read_bytes_per_s / 1e9, f32_peak / 1e9);
  b.ceilings = text;
  if (bf16_peak > 0) {
    std::snprintf(text, sizeof(text), ", %s peak %.1f GFLOP/s",
                  b.matmul_precision == "bf16" ? "bf16 dot" : "AMX bf16", bf16_peak / 1e9);
    b.ceilings += text;
  }
  return b;
}

absl::StatusOr<nlohmann::ordered_json> RunEngineBench(const engine::Model& model,
                                                      const std::string& model_dir,
                                                      EngineBackend& backend,
                                                      const EngineBenchOptions& o) {
  if (backend.warm_up) RETURN_IF_ERROR(RunRequests(model, backend, o).status());
  ASSIGN_OR_RETURN(Measured m, RunRequests(model, backend, o));
  const engine::ModelConfig& cfg = model.config();
  const engine::WeightStats w = model.weight_stats();
  const double bandwidth = backend.read_bytes_per_s, peak = backend.peak_flops;
  const engine::ModelWeights& weights = model.weights();
  const double embed_bytes =
      weights.lm_head.data == weights.embed.data ? 0.0 : double(weights.embed.num_bytes());
  const double step_bytes =
      DecodeWeightBytes(cfg, double(w.total_bytes), embed_bytes,
                        double(w.routed_expert_bytes_per_layer_expert), o.batch) +
      double(o.batch) * double(backend.layout.state_bytes_per_sequence()) * 2.0 +
      double(o.batch) * double(backend.layout.mla_bytes_per_token()) *
          double(o.prompt_tokens + o.gen_tokens / 2);
  // A decode step can be no faster than reading its bytes or doing its weight FLOPs (large
  // batches turn compute-bound): the floor is the slower of the two.
  const double flops_per_token = 2.0 * double(w.active_params_per_token);
  const double step_read_s = step_bytes / bandwidth;
  const double step_compute_s = double(o.batch) * flops_per_token / peak;
  const double decode_floor_tps = o.batch / std::max(step_read_s, step_compute_s);
  const char* decode_bound = step_read_s >= step_compute_s ? "bandwidth" : "compute";
  const double prefill_floor_tps = peak / flops_per_token;
  const double prefill_tps = m.prefill_tokens / m.prefill_s;
  const double decode_tps = m.decode_tokens / m.decode_s;
  nlohmann::ordered_json report{
      {"model", model_dir},
      {"device", backend.device},
      {"threads", omp_get_max_threads()},
      {"batch", o.batch},
      {"matmul_precision", backend.matmul_precision},
      {"prompt_tokens", o.prompt_tokens},
      {"gen_tokens", o.gen_tokens},
      {"max_num_batched_tokens", std::max<int64_t>(o.max_num_batched_tokens, o.batch)},
      {"sampling", o.temperature <= 0.0f ? std::string("greedy")
                                         : absl::StrFormat("temperature %g, top_p %g, top_k %d",
                                                           o.temperature, o.top_p, o.top_k)},
      {"kv_cache_dtype", std::string(LatentDTypeName(backend.layout.latent_dtype))},
      {"warm_up_runs", backend.warm_up ? 1 : 0},
      {"prefill_tokens_per_s", prefill_tps},
      {"decode_tokens_per_s", decode_tps},
      {"prefill_floor_tokens_per_s", prefill_floor_tps},
      {"decode_floor_tokens_per_s", decode_floor_tps},
      {"prefill_pct_of_roofline", 100.0 * prefill_tps / prefill_floor_tps},
      {"decode_pct_of_roofline", 100.0 * decode_tps / decode_floor_tps},
      {"decode_floor_bound_by", decode_bound},
      {"decode_execute_share", m.decode_s > 0 ? m.decode_execute_s / m.decode_s : 0.0},
      {"measured_read_bandwidth_gb_s", bandwidth / 1e9},
      {"measured_peak_" + backend.peak_name + "_gflop_s", peak / 1e9},
      {"decode_step_bytes", step_bytes},
      {"weight_bytes", w.total_bytes},
      {"weights",
       {{"routed_experts", engine::RoutedExpertFormat(weights)},
        {"projections", engine::ProjectionFormat(weights)},
        {"lm_head", engine::WeightFormatName(weights.lm_head.format)}}},
      {"active_params_per_token", w.active_params_per_token},
  };
  if (backend.annotate) backend.annotate(report);
  return report;
}

void PrintEngineBenchTable(const nlohmann::ordered_json& r, const EngineBackend& backend) {
  std::printf(
      "model %s, %s, %d threads, batch %d, prompt %lld, gen %lld, %s latent cache, %s\n",
      r["model"].get<std::string>().c_str(), backend.device.c_str(), r["threads"].get<int>(),
      r["batch"].get<int>(), static_cast<long long>(r["prompt_tokens"].get<int64_t>()),
      static_cast<long long>(r["gen_tokens"].get<int64_t>()),
      r["kv_cache_dtype"].get<std::string>().c_str(), r["sampling"].get<std::string>().c_str());
  std::printf("ceilings: %s\n", backend.ceilings.c_str());
  if (r["warm_up_runs"].get<int>() > 0) {
    std::printf("timed after %d untimed run(s) of the same requests (warm-up)\n",
                r["warm_up_runs"].get<int>());
  }
  const nlohmann::ordered_json& formats = r["weights"];
  std::printf(
      "weights: %.2f GB (routed experts %s, projections %s, lm_head %s); a decode step "
      "reads %.1f MB\n",
      r["weight_bytes"].get<double>() / 1e9, formats["routed_experts"].get<std::string>().c_str(),
      formats["projections"].get<std::string>().c_str(),
      formats["lm_head"].get<std::string>().c_str(), r["decode_step_bytes"].get<double>() / 1e6);
  std::printf("%-8s %14s %18s %8s\n", "phase", "tokens/s", "roofline tokens/s", "% floor");
  std::printf("%-8s %14.1f %18.1f %7.1f%%\n", "prefill", r["prefill_tokens_per_s"].get<double>(),
              r["prefill_floor_tokens_per_s"].get<double>(),
              r["prefill_pct_of_roofline"].get<double>());
  std::printf("%-8s %14.1f %18.1f %7.1f%%  (floor bound by %s; %.0f%% of the time executing)\n",
              "decode", r["decode_tokens_per_s"].get<double>(),
              r["decode_floor_tokens_per_s"].get<double>(),
              r["decode_pct_of_roofline"].get<double>(),
              r["decode_floor_bound_by"].get<std::string>().c_str(),
              100.0 * r["decode_execute_share"].get<double>());
  if (r.contains("decode_graph_nodes")) {
    std::printf("decode step: a CUDA graph of %lld nodes (%.1f per layer)\n",
                static_cast<long long>(r["decode_graph_nodes"].get<int64_t>()),
                r["decode_graph_nodes_per_layer"].get<double>());
  }
}

}  // namespace strata::bench
