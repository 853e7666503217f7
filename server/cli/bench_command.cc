// `strata bench`: end-to-end prefill and decode tokens/s through the real engine (scheduler +
// executor + model), like llama-bench, each next to its roofline floor measured in the same
// run (PERF.md): decode is bounded by the bytes a step must read, prefill by its FLOPs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>

#include <omp.h>
#include <nlohmann/json.hpp>

#include "bench/roofline.h"
#include "core/log.h"
#include "core/status.h"
#include "engine/executor.h"
#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/cli/commands.h"
#include "server/cli/default_model.h"
#include "server/cli/flags.h"

namespace strata::cli {
namespace {

const std::vector<FlagSpec> kBenchFlags = {
    {"model", true, "checkpoint directory (default: the embedded demo model)"},
    {"prompt-tokens", true, "prompt length per sequence (default 512)"},
    {"gen-tokens", true, "generated tokens per sequence (default 128)"},
    {"batch", true, "concurrent sequences (default 1)"},
    {"threads", true, "OpenMP threads (default: all cores)"},
    {"json", false, "print one JSON object instead of a table"},
};

// Weight bytes one decode step must read for `batch` tokens: everything but the routed
// experts, plus the experts the batch is expected to touch (E·(1 − (1 − k/E)^batch)).
double DecodeWeightBytes(const engine::ModelConfig& cfg, double total_bytes,
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
  // the embedding table is read one row per token, not whole
  const double embed = double(cfg.vocab_size) * cfg.hidden_size * 2.0;
  return total_bytes - all_routed - embed +
         routed_bytes_per_expert_layer * touched * num_moe_layers;
}

struct Measured {
  double prefill_s = 0, decode_s = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0;
};

absl::StatusOr<Measured> RunEngine(const engine::Model& model, int64_t prompt_tokens,
                                   int64_t gen_tokens, int batch) {
  const kvcache::ModelCacheSpec spec = engine::CacheSpecFor(model.config());
  kvcache::CacheLayout layout;
  layout.num_mla_layers = spec.num_mla_layers;
  layout.latent_dim = spec.latent_dim;
  layout.latent_dtype = spec.latent_dtype;
  layout.block_size = 64;
  layout.num_blocks = static_cast<int32_t>(batch * ((prompt_tokens + gen_tokens) / 64 + 2));
  layout.num_kda_layers = spec.num_kda_layers;
  layout.kda_state_bytes_per_layer = spec.kda_state_bytes_per_layer;
  layout.kda_conv_bytes_per_layer = spec.kda_conv_bytes_per_layer;
  layout.num_slots = batch;
  layout.num_checkpoints = 0;
  scheduler::SchedulerConfig config;
  config.max_num_seqs = batch;
  config.max_num_batched_tokens = std::max<int64_t>(512, batch);
  config.max_model_len = prompt_tokens + gen_tokens;
  config.num_blocks = layout.num_blocks;
  config.num_slots = layout.num_slots;
  config.has_kda_layers = spec.num_kda_layers > 0;
  config.enable_prefix_caching = false;
  ASSIGN_OR_RETURN(auto sched, scheduler::Scheduler::Create(config));
  engine::CpuExecutor exec(model, layout);
  std::mt19937 rng(1);
  for (int b = 0; b < batch; ++b) {
    scheduler::Request r;
    r.request_id = "bench" + std::to_string(b);
    for (int64_t i = 0; i < prompt_tokens; ++i) {
      r.prompt.push_back(static_cast<int32_t>(rng() % model.config().vocab_size));
    }
    r.sampling.temperature = 0.0f;
    r.max_tokens = gen_tokens;
    r.ignore_eos = true;
    RETURN_IF_ERROR(sched->Add(std::move(r)).status());
  }
  Measured m;
  int first_tokens = 0;
  auto start = std::chrono::steady_clock::now();
  bool decoding = false;
  while (sched->HasWork()) {
    engine::StepPlan plan = sched->Schedule();
    engine::StepResult result = exec.Execute(plan);
    for (const auto& e : sched->Commit(result)) {
      if (e.token && e.num_output_tokens == 1) ++first_tokens;
    }
    if (!decoding && first_tokens == batch) {  // every prompt is in: prefill done
      m.prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      start = std::chrono::steady_clock::now();
      decoding = true;
    }
  }
  m.decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.prefill_tokens = prompt_tokens * batch;
  m.decode_tokens = (gen_tokens - 1) * batch;
  return m;
}

absl::Status RunBench(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, kBenchFlags));
  ASSIGN_OR_RETURN(int64_t prompt_tokens, flags.GetInt("prompt-tokens", 512, 1, 1 << 20));
  ASSIGN_OR_RETURN(int64_t gen_tokens, flags.GetInt("gen-tokens", 128, 2, 1 << 20));
  ASSIGN_OR_RETURN(int64_t batch, flags.GetInt("batch", 1, 1, 4096));
  ASSIGN_OR_RETURN(int64_t threads, flags.GetInt("threads", 0, 0, 1024));
  if (threads > 0) omp_set_num_threads(static_cast<int>(threads));
  const bool json = flags.Has("json");
  if (json) log::SetLevel(log::Level::kWarn);
  ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(flags.GetOr("model", "")));
  ASSIGN_OR_RETURN(auto model, engine::Model::Load(dir));
  const engine::ModelConfig& cfg = model->config();

  const double bandwidth = bench::MeasureReadBandwidth();
  const double peak = bench::MeasurePeakF32Flops();
  ASSIGN_OR_RETURN(Measured m,
                   RunEngine(*model, prompt_tokens, gen_tokens, static_cast<int>(batch)));

  const engine::WeightStats w = model->weight_stats();
  const double step_bytes =
      DecodeWeightBytes(cfg, double(w.total_bytes), double(w.routed_expert_bytes_per_layer_expert),
                        static_cast<int>(batch)) +
      double(batch) * model->geometry().state_bytes_per_sequence() * 2.0 +
      double(batch) * model->geometry().latent_bytes_per_token() *
          double(prompt_tokens + gen_tokens / 2);
  // A decode step can be no faster than reading its bytes or doing its weight FLOPs (large
  // batches turn compute-bound): the floor is the slower of the two.
  const double flops_per_token = 2.0 * double(w.active_params_per_token);
  const double step_read_s = step_bytes / bandwidth;
  const double step_compute_s = double(batch) * flops_per_token / peak;
  const double decode_floor_tps = batch / std::max(step_read_s, step_compute_s);
  const char* decode_bound = step_read_s >= step_compute_s ? "bandwidth" : "compute";
  const double prefill_floor_tps = peak / flops_per_token;
  const double prefill_tps = m.prefill_tokens / m.prefill_s;
  const double decode_tps = m.decode_tokens / m.decode_s;

  nlohmann::ordered_json out = {
      {"model", dir},
      {"threads", omp_get_max_threads()},
      {"batch", batch},
      {"prompt_tokens", prompt_tokens},
      {"gen_tokens", gen_tokens},
      {"prefill_tokens_per_s", prefill_tps},
      {"decode_tokens_per_s", decode_tps},
      {"prefill_floor_tokens_per_s", prefill_floor_tps},
      {"decode_floor_tokens_per_s", decode_floor_tps},
      {"prefill_pct_of_roofline", 100.0 * prefill_tps / prefill_floor_tps},
      {"decode_pct_of_roofline", 100.0 * decode_tps / decode_floor_tps},
      {"decode_floor_bound_by", decode_bound},
      {"measured_read_bandwidth_gb_s", bandwidth / 1e9},
      {"measured_peak_f32_gflop_s", peak / 1e9},
      {"decode_step_bytes", step_bytes},
      {"active_params_per_token", w.active_params_per_token},
  };
  if (json) {
    std::cout << out.dump() << std::endl;
    return absl::OkStatus();
  }
  std::printf("model %s, %d threads, batch %lld, prompt %lld, gen %lld\n", dir.c_str(),
              omp_get_max_threads(), static_cast<long long>(batch),
              static_cast<long long>(prompt_tokens), static_cast<long long>(gen_tokens));
  std::printf("ceilings: read bandwidth %.1f GB/s, f32 peak %.1f GFLOP/s\n", bandwidth / 1e9,
              peak / 1e9);
  std::printf("%-8s %14s %18s %8s\n", "phase", "tokens/s", "roofline tokens/s", "% floor");
  std::printf("%-8s %14.1f %18.1f %7.1f%%\n", "prefill", prefill_tps, prefill_floor_tps,
              100.0 * prefill_tps / prefill_floor_tps);
  std::printf("%-8s %14.1f %18.1f %7.1f%%  (floor bound by %s)\n", "decode", decode_tps,
              decode_floor_tps, 100.0 * decode_tps / decode_floor_tps, decode_bound);
  return absl::OkStatus();
}

}  // namespace

int BenchCommand(const std::vector<std::string>& args) {
  absl::Status status = RunBench(args);
  if (!status.ok()) {
    std::fprintf(stderr, "strata bench: %s\n", std::string(status.message()).c_str());
    if (status.code() == absl::StatusCode::kInvalidArgument) {
      std::fprintf(stderr, "usage: strata bench [flags]\n%s", FlagsHelp(kBenchFlags).c_str());
      return 2;
    }
    return 1;
  }
  return 0;
}

}  // namespace strata::cli
