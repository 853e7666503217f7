// The engine measurement behind `strata bench` (server/cli/bench_command.cc) and the GPU
// check's standalone runner (bench/cuda_engine_bench.cc): requests of random tokens through
// the real scheduler and a backend's executor, prefill and decode tokens/s, each next to its
// roofline floor computed from ceilings the backend measured in the same run (docs/performance.md):
// decode is bounded by the bytes a step must read (weights touched, states, latents) or by its
// weight FLOPs, whichever is slower; prefill by its FLOPs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/executor.h"
#include "engine/model.h"
#include "kvcache/cache_layout.h"
#include "kvcache/memory_planner.h"
#include "scheduler/scheduler_config.h"

namespace strata::bench {

struct EngineBenchOptions {
  int64_t prompt_tokens = 512;
  int64_t gen_tokens = 128;
  int batch = 1;
  // The step's token budget (the prefill chunk of a long prompt); at least `batch`.
  int64_t max_num_batched_tokens = scheduler::SchedulerConfig{}.max_num_batched_tokens;
  // Sampling of every token (sequence b seeded with b): temperature 0 is greedy (Argmax).
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  // --kv-cache-dtype; nullopt: the device's default (cpu f32, cuda bf16).
  std::optional<LatentDType> latent_dtype;
};

// An executor over caches sized for the run, and the ceilings its floors divide by.
struct EngineBackend {
  std::string device;  // "cpu" | "cuda"
  std::unique_ptr<engine::StepExecutor> executor;
  kvcache::CacheLayout layout;
  double read_bytes_per_s = 0.0;
  double peak_flops = 0.0;  // f32 (or bf16 dot products) on the CPU, bf16 tensor cores on a GPU
  std::string peak_name = "f32";         // which peak: "f32" | "bf16" | "amx_bf16"
  std::string matmul_precision = "f32";  // products: "f32" | "bf16" | "bf16-amx" (GPU: "bf16")
  std::string ceilings;                  // one line for the report
  int prefill_chunk_alignment = 0;       // SchedulerConfig::prefill_chunk_alignment it needs
  // Run the same requests once, untimed, before the timed run: on a GPU the first steps pay
  // start-up costs (modules loaded at first launch, one CUDA graph captured per decode bucket)
  // that a serving process pays once, not per request.
  bool warm_up = false;
  // Adds what only this backend knows to the report after the timed run (null: nothing).
  std::function<void(nlohmann::ordered_json&)> annotate;
};

// Pages for every sequence's prompt and output, one slot each, no checkpoints.
kvcache::CacheLayout EngineBenchLayout(const kvcache::ModelCacheSpec& spec,
                                       const EngineBenchOptions& options);

absl::StatusOr<EngineBackend> CpuEngineBackend(const engine::Model& model,
                                               const EngineBenchOptions& options);

// Runs the benchmark; the report's fields are what `strata bench --json` prints.
absl::StatusOr<nlohmann::ordered_json> RunEngineBench(const engine::Model& model,
                                                      const std::string& model_dir,
                                                      EngineBackend& backend,
                                                      const EngineBenchOptions& options);

// The human-readable form of a report.
void PrintEngineBenchTable(const nlohmann::ordered_json& report, const EngineBackend& backend);

}  // namespace strata::bench
