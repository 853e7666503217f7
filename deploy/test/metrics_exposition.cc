// Prints the /metrics exposition of a Metrics registry after some activity (two ranks, eight
// experts, requests with every finish reason; both KV offload tiers on and used; the vision
// encoder's series), for the dashboard and rule checks in deploy/test/ that must not depend on a
// running server.
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "prometheus/registry.h"
#include "server/http_metrics.h"
#include "server/metrics.h"
#include "server/offload_metrics.h"
#include "server/store_metrics.h"
#include "server/vision_metrics.h"

int main() {
  using strata::server::Metrics;
  auto registry = std::make_shared<prometheus::Registry>();
  const strata::server::MetricsOptions options = {
      .num_experts = 8,
      .cache_config = {{"block_size", "64"}, {"cache_dtype", "bf16"}, {"num_gpu_blocks", "4096"}}};
  std::vector<std::unique_ptr<Metrics>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.push_back(std::make_unique<Metrics>("strata-demo", rank, options, registry));
  }
  const std::vector<int64_t> expert_tokens = {40, 3, 5, 9, 2, 0, 7, 6};
  for (auto& metrics : ranks) {
    strata::server::StepStats step;
    step.num_running = 2;
    step.num_prefill_tokens = 300;
    step.num_decode_tokens = 2;
    step.kv_cache_usage = 0.4;
    step.state_slot_usage = 0.25;
    step.num_prefix_query_tokens = 256;
    step.num_prefix_hit_tokens = 128;
    step.num_kda_checkpoints = 2;
    step.num_kda_checkpoints_in_slots = 1;
    step.kda_checkpoint_bytes = 1 << 20;
    step.step_seconds = 0.02;
    step.all_to_all_seconds = 0.002;
    step.expert_tokens = expert_tokens;
    metrics->OnStep(step);
    for (const char* reason : {"stop", "length", "abort", "tool_calls", "error"}) {
      strata::server::RequestTimings request;
      request.finished_reason = reason;
      request.queue_seconds = 0.01;
      request.ttft_seconds = 0.2;
      request.prefill_seconds = 0.19;
      request.decode_seconds = 1.5;
      request.e2e_seconds = 1.7;
      request.inter_token_seconds = {0.03, 0.04};
      request.num_prompt_tokens = 300;
      request.num_generation_tokens = 3;
      metrics->OnRequestFinished(request);
    }
  }
  // The process's HTTP series (vLLM's names) in the same registry.
  strata::server::HttpMetrics http(
      [](std::string_view path) { return path == "/x" ? std::string_view("none") : path; },
      registry);
  for (int status : {200, 200, 400, 429, 500}) {
    http.Observe({.method = "POST",
                  .path = "/v1/chat/completions",
                  .status = status,
                  .seconds = 0.5,
                  .request_bytes = 100,
                  .response_bytes = 300});
  }
  http.Observe({.method = "GET", .path = "/x", .status = 404, .seconds = 0.001});
  // The stores' gauges (a batch running, a background response).
  strata::server::StoreMetrics stores(*registry, /*batches_on=*/true, /*responses_on=*/true);
  stores.Set({.batches_by_status = {{"in_progress", 1}, {"completed", 2}},
              .requests_pending = 12,
              .files_bytes = 1 << 20,
              .files_capacity_bytes = 1 << 30},
             {.stored = 5, .bytes = 4096, .capacity_bytes = 1 << 27, .background_running = 1});
  // The offload tiers' series (--kv-offload-memory, --kv-offload-dir): every counter above zero
  // and loads in several latency buckets, so that each dashboard query returns a series.
  strata::server::OffloadMetrics offload(*registry, /*host_on=*/true, /*disk_on=*/true);
  strata::kvcache::OffloadTiersStats tiers;
  tiers.host = strata::kvcache::HostTierStats{.num_entries = 40,
                                              .bytes_used = 40 << 20,
                                              .capacity_bytes = int64_t{8} << 30,
                                              .hits = 30,
                                              .misses = 10,
                                              .bytes_in = 90 << 20,
                                              .bytes_out = 30 << 20,
                                              .evictions = 50,
                                              .refused = 1};
  tiers.dropped_entries = 2;
  tiers.disk = strata::kvcache::DiskTierStats{.num_entries = 500,
                                              .bytes_used = int64_t{500} << 20,
                                              .capacity_bytes = int64_t{64} << 30,
                                              .hits = 20,
                                              .misses = 5,
                                              .bytes_written = 50 << 20,
                                              .bytes_read = 20 << 20,
                                              .write_failures = 3,
                                              .dropped_puts = 4,
                                              .refused_puts = 0,
                                              .evictions = 6,
                                              .corrupt_entries = 1};
  for (double seconds : {0.0001, 0.0003, 0.001, 0.004}) tiers.host_load_latency.Record(seconds);
  for (double seconds : {0.001, 0.006, 0.02, 0.1}) tiers.disk->load_latency.Record(seconds);
  strata::scheduler::SchedulerStats scheduler;
  scheduler.num_tier_hit_tokens = 3200;
  scheduler.num_tier_load_failures = 1;
  offload.Set(tiers, scheduler);
  // The vision encoder's series (a model with a vision tower): an image waiting, one encoding.
  strata::server::VisionMetrics vision(*registry, /*on=*/true);
  vision.Set({.queue_images = 1,
              .running_images = 1,
              .cache_bytes = 3 << 20,
              .cache_capacity_bytes = 1 << 30,
              .images_encoded = 7,
              .encode_seconds = 4.5,
              .cache_hits = 3});
  std::cout << ranks.front()->Serialize();
  return 0;
}
