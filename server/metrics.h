// Prometheus metrics of one data-parallel rank (docs/api.md, "Metrics"), served as text on
// /metrics.
//
// Names mirror vLLM's with the prefix `strata:` so dashboards and autoscalers port with a prefix
// change; every series carries the labels `model_name` and `rank`. Counters end in `_total`.
//
//   gauges      strata:num_requests_running, strata:num_requests_waiting,
//               strata:kv_cache_usage_perc (MLA pages, 0..1), strata:state_slot_usage_perc
//               (KDA slots, 0..1), strata:kda_checkpoints, strata:kda_checkpoints_in_state_slots,
//               strata:kda_checkpoint_bytes, strata:prefill_chunk_limit_tokens (prompt tokens
//               a step that also decodes may take, from --target-itl-ms; 0: the budget alone),
//               strata:prefill_tokens_processed, strata:prefill_tokens_remaining (prompt
//               tokens computed and still to compute, over the running requests prefilling),
//               strata:expert_load_imbalance (max/mean of per-expert routed tokens over the
//               last `expert_window_steps` steps; 1 = balanced or idle),
//               strata:cache_config_info (always 1; the cache configuration as labels, as
//               vLLM's cache_config_info: block_size, cache_dtype, num_gpu_blocks, ...)
//   counters    strata:prompt_tokens_total, strata:generation_tokens_total,
//               strata:iteration_tokens_total, strata:request_success_total{finished_reason},
//               strata:prefix_cache_queries_total, strata:prefix_cache_hits_total (tokens),
//               strata:num_preemptions_total, strata:expert_routed_tokens_total{expert},
//               strata:spec_decode_num_drafts_total, strata:spec_decode_num_draft_tokens_total,
//               strata:spec_decode_num_accepted_tokens_total,
//               strata:kda_checkpoint_evictions_total (KDA checkpoints evicted to make room:
//               a steady climb means the checkpoint budget is too small for the load)
//   histograms  (seconds) strata:time_to_first_token_seconds, strata:inter_token_latency_seconds,
//               strata:e2e_request_latency_seconds, strata:request_queue_time_seconds,
//               strata:request_prefill_time_seconds, strata:request_decode_time_seconds,
//               strata:step_duration_seconds, strata:all_to_all_seconds;
//               (tokens) strata:iteration_tokens, strata:request_prompt_tokens,
//               strata:request_generation_tokens
//
// vLLM's `iteration_tokens_total` is a histogram; here it is a counter (a `_total` histogram
// fails `promtool check metrics`) and the per-step distribution is `strata:iteration_tokens`.
//
// Threading: OnStep is called by one thread, the rank's engine loop, after each step.
// OnRequestFinished and Serialize may be called from any thread. Counters and gauges are atomics;
// a histogram takes an uncontended mutex once per step or per request, never per token
// (inter-token latencies arrive in one batch when the request finishes).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace strata::server {

struct MetricsOptions {
  int num_experts = 0;           // routed experts (global ids); 0: no per-expert series
  int expert_window_steps = 64;  // steps averaged by strata:expert_load_imbalance, >= 1
  // Labels of strata:cache_config_info besides model_name and rank (e.g. {"cache_dtype",
  // "fp8"}); empty: the series is not exported.
  std::vector<std::pair<std::string, std::string>> cache_config;
};

// What one engine step did and the cache state after it. Counts are for this step only
// ("deltas") unless marked "now".
struct StepStats {
  int64_t num_running = 0;                   // now: sequences running
  int64_t num_waiting = 0;                   // now: queued, including preempted sequences
  int64_t num_prefill_tokens = 0;            // prompt (or recompute) tokens computed
  int64_t num_decode_tokens = 0;             // tokens generated
  double kv_cache_usage = 0.0;               // now: fraction of MLA latent pages held, [0, 1]
  double state_slot_usage = 0.0;             // now: fraction of KDA state slots held, [0, 1]
  int64_t num_preemptions = 0;               // sequences preempted
  int64_t num_spec_drafts = 0;               // sequences that verified drafts
  int64_t num_spec_draft_tokens = 0;         // draft tokens verified
  int64_t num_spec_accepted_tokens = 0;      // of those, accepted
  int64_t num_prefix_query_tokens = 0;       // prompt tokens looked up in the prefix cache
  int64_t num_prefix_hit_tokens = 0;         // of those, tokens found
  int64_t num_kda_checkpoints = 0;           // now: KDA checkpoints held
  int64_t num_kda_checkpoints_in_slots = 0;  // now: of those, in idle live state slots
  int64_t kda_checkpoint_bytes = 0;          // now: bytes those checkpoints occupy
  int64_t num_kda_checkpoint_evictions = 0;  // checkpoints evicted (LRU) to make room
  int64_t prefill_chunk_limit_tokens = 0;    // now: a decoding step's prompt tokens, at most
  // Now, over the running requests still prefilling: prompt tokens computed (prefix-cache hits
  // included) and still to compute.
  int64_t num_prefill_tokens_computed = 0;
  int64_t num_prefill_tokens_remaining = 0;
  double step_seconds = 0.0;                 // wall time of the step
  std::optional<double> all_to_all_seconds;  // MoE all-to-all time in the step (all layers)
  // [num_experts] tokens this rank routed to each (global) expert in the step, summed over MoE
  // layers; empty when not measured. Valid only during the OnStep call.
  std::span<const int64_t> expert_tokens;
};

// One finished (or aborted) request. Times in seconds; an unset optional is not observed
// (e.g. no first token for a request aborted while queued).
struct RequestTimings {
  std::string request_id;
  std::string finished_reason;              // "stop", "length", "abort", "tool_calls", "error"
  std::optional<double> queue_seconds;      // arrival → first scheduled
  std::optional<double> ttft_seconds;       // arrival → first token
  std::optional<double> prefill_seconds;    // first scheduled → first token
  std::optional<double> decode_seconds;     // first token → last token
  double e2e_seconds = 0.0;                 // arrival → finish
  std::vector<double> inter_token_seconds;  // gaps between consecutive output tokens
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  int64_t num_generation_tokens = 0;
};

// Histogram bucket upper bounds (the +Inf bucket is implicit).
std::vector<double> LatencyBucketsSeconds();   // 1-2-5 steps, 1 ms … 1000 s (1M-token prefills)
std::vector<double> AllToAllBucketsSeconds();  // 1-2-5 steps, 100 µs … 10 s
std::vector<double> TokenCountBuckets();       // 1-2-5 steps, 1 … 2M tokens

class Metrics {
 public:
  // Registers every metric with the labels {model_name, rank} in `registry`, or in a registry of
  // its own when null. Ranks of one process share one registry, so Serialize() of any of them
  // returns the whole process's metrics (one # TYPE line per name).
  Metrics(std::string model_name, int rank, MetricsOptions options = {},
          std::shared_ptr<prometheus::Registry> registry = nullptr);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Engine loop thread only. CHECK-fails if expert_tokens is non-empty and its size differs from
  // options.num_experts (a wiring bug).
  void OnStep(const StepStats& step);
  // The gauges ("now" values) of `step` alone, no counter or histogram: the state before the
  // first step (the serve command, once the metrics exist).
  void SetGauges(const StepStats& step);
  // Any thread.
  void OnRequestFinished(const RequestTimings& request);

  // Prometheus text exposition format 0.0.4 of the whole registry. Any thread.
  std::string Serialize() const;

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }
  const std::string& model_name() const { return model_name_; }
  int rank() const { return rank_; }

 private:
  struct Handles;  // pointers into the registry's families
  void ObserveExperts(std::span<const int64_t> expert_tokens);
  prometheus::Counter& SuccessCounter(std::string_view finished_reason);

  const std::string model_name_;
  const int rank_;
  const MetricsOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Handles> h_;

  // Imbalance window (engine thread only): a ring of the last steps' per-expert counts.
  std::vector<int64_t> window_;       // [expert_window_steps, num_experts]
  std::vector<int64_t> window_sums_;  // [num_experts]
  int window_next_ = 0;               // ring row to overwrite next
};

}  // namespace strata::server
