#include "server/metrics.h"

#include <algorithm>
#include <array>
#include <utility>

#include "core/check.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace strata::server {
namespace {

using prometheus::Labels;

constexpr std::array<std::string_view, 5> kKnownFinishReasons = {"stop", "length", "abort",
                                                                 "tool_calls", "error"};

// {1, 2, 5} × 10^k for k in [first_exponent, last_exponent] up to `last`, then `last`. Each bound
// is the double nearest its decimal value (an exact quotient or product of small integers), so
// the `le` labels print as written.
std::vector<double> OneTwoFive(int first_exponent, int last_exponent, double last) {
  std::vector<double> bounds;
  for (int k = first_exponent; k <= last_exponent; ++k) {
    double power = 1.0;  // 10^|k|, exact
    for (int i = 0; i < (k < 0 ? -k : k); ++i) power *= 10.0;
    for (double m : {1.0, 2.0, 5.0}) {
      const double bound = k < 0 ? m / power : m * power;
      if (bound <= last) bounds.push_back(bound);
    }
  }
  if (bounds.empty() || bounds.back() < last) bounds.push_back(last);
  return bounds;
}

prometheus::Gauge& AddGauge(prometheus::Registry& registry, const std::string& name,
                            const std::string& help, const Labels& labels) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add(labels);
}

prometheus::Counter& AddCounter(prometheus::Registry& registry, const std::string& name,
                                const std::string& help, const Labels& labels) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
}

prometheus::Histogram& AddHistogram(prometheus::Registry& registry, const std::string& name,
                                    const std::string& help, const Labels& labels,
                                    const std::vector<double>& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add(labels, buckets);
}

void ObserveIfSet(prometheus::Histogram& histogram, const std::optional<double>& value) {
  if (value) histogram.Observe(*value);
}

}  // namespace

std::vector<double> LatencyBucketsSeconds() { return OneTwoFive(-3, 3, 1000.0); }
std::vector<double> AllToAllBucketsSeconds() { return OneTwoFive(-4, 1, 10.0); }
std::vector<double> TokenCountBuckets() { return OneTwoFive(0, 6, 2e6); }

struct Metrics::Handles {
  prometheus::Gauge* num_requests_running;
  prometheus::Gauge* num_requests_waiting;
  prometheus::Gauge* kv_cache_usage_perc;
  prometheus::Gauge* state_slot_usage_perc;
  prometheus::Gauge* kda_checkpoints;
  prometheus::Gauge* kda_checkpoints_in_state_slots;
  prometheus::Gauge* prefill_chunk_limit_tokens;
  prometheus::Gauge* prefill_tokens_processed;
  prometheus::Gauge* prefill_tokens_remaining;
  prometheus::Gauge* kda_checkpoint_bytes;
  prometheus::Gauge* expert_load_imbalance;
  prometheus::Counter* prompt_tokens_total;
  prometheus::Counter* generation_tokens_total;
  prometheus::Counter* iteration_tokens_total;
  prometheus::Counter* prefix_cache_queries_total;
  prometheus::Counter* prefix_cache_hits_total;
  prometheus::Counter* num_preemptions_total;
  prometheus::Counter* kda_checkpoint_evictions_total;
  prometheus::Counter* spec_decode_num_drafts_total;
  prometheus::Counter* spec_decode_num_draft_tokens_total;
  prometheus::Counter* spec_decode_num_accepted_tokens_total;
  prometheus::Family<prometheus::Counter>* request_success_family;
  std::array<prometheus::Counter*, kKnownFinishReasons.size()> request_success;
  std::vector<prometheus::Counter*> expert_routed_tokens;  // [num_experts]
  prometheus::Histogram* time_to_first_token;
  prometheus::Histogram* inter_token_latency;
  prometheus::Histogram* e2e_request_latency;
  prometheus::Histogram* request_queue_time;
  prometheus::Histogram* request_prefill_time;
  prometheus::Histogram* request_decode_time;
  prometheus::Histogram* step_duration;
  prometheus::Histogram* all_to_all;
  prometheus::Histogram* iteration_tokens;
  prometheus::Histogram* request_prompt_tokens;
  prometheus::Histogram* request_generation_tokens;
};

Metrics::Metrics(std::string model_name, int rank, MetricsOptions options,
                 std::shared_ptr<prometheus::Registry> registry)
    : model_name_(std::move(model_name)),
      rank_(rank),
      options_(options),
      registry_(registry ? std::move(registry) : std::make_shared<prometheus::Registry>()),
      h_(std::make_unique<Handles>()) {
  CHECK_GE(options_.num_experts, 0);
  CHECK_GE(options_.expert_window_steps, 1);
  prometheus::Registry& r = *registry_;
  const Labels l = {{"model_name", model_name_}, {"rank", std::to_string(rank_)}};
  Handles& h = *h_;

  h.num_requests_running = &AddGauge(r, "strata:num_requests_running",
                                     "Number of requests in model execution batches.", l);
  h.num_requests_waiting =
      &AddGauge(r, "strata:num_requests_waiting", "Number of requests waiting to be processed.", l);
  h.kv_cache_usage_perc = &AddGauge(r, "strata:kv_cache_usage_perc",
                                    "MLA latent cache usage: fraction of pages held (0-1).", l);
  h.state_slot_usage_perc = &AddGauge(r, "strata:state_slot_usage_perc",
                                      "KDA state slot usage: fraction of slots held (0-1).", l);
  h.kda_checkpoints =
      &AddGauge(r, "strata:kda_checkpoints", "KDA state checkpoints held by the prefix cache.", l);
  h.kda_checkpoints_in_state_slots = &AddGauge(
      r, "strata:kda_checkpoints_in_state_slots",
      "Of the KDA checkpoints, those held in live state slots no sequence holds: admissions "
      "take these slots back when they need them.",
      l);
  h.prefill_chunk_limit_tokens = &AddGauge(
      r, "strata:prefill_chunk_limit_tokens",
      "Prompt tokens a step that also decodes may take (--target-itl-ms: sized to the measured "
      "prefill rate); 0: no limit but --max-num-batched-tokens.",
      l);
  h.prefill_tokens_processed = &AddGauge(
      r, "strata:prefill_tokens_processed",
      "Prompt tokens computed so far (prefix-cache hits included) of the running requests "
      "whose prompt is still being prefilled.",
      l);
  h.prefill_tokens_remaining = &AddGauge(
      r, "strata:prefill_tokens_remaining",
      "Prompt tokens still to compute of the running requests whose prompt is being prefilled.", l);
  h.kda_checkpoint_bytes = &AddGauge(r, "strata:kda_checkpoint_bytes",
                                     "Bytes held by KDA state checkpoints of the prefix cache.", l);
  h.expert_load_imbalance = &AddGauge(
      r, "strata:expert_load_imbalance",
      "Max over mean of per-expert routed tokens over the recent step window (1 = balanced).", l);
  h.expert_load_imbalance->Set(1.0);
  if (!options_.cache_config.empty()) {
    Labels info = l;
    for (const auto& [key, value] : options_.cache_config) info[key] = value;
    AddGauge(r, "strata:cache_config_info", "Cache configuration (as labels; value 1).", info)
        .Set(1.0);
  }

  h.prompt_tokens_total =
      &AddCounter(r, "strata:prompt_tokens_total", "Number of prefill tokens processed.", l);
  h.generation_tokens_total =
      &AddCounter(r, "strata:generation_tokens_total", "Number of generation tokens processed.", l);
  h.iteration_tokens_total = &AddCounter(r, "strata:iteration_tokens_total",
                                         "Tokens (prefill + decode) run by engine steps.", l);
  h.prefix_cache_queries_total =
      &AddCounter(r, "strata:prefix_cache_queries_total",
                  "Prefix cache queries, in prompt tokens looked up.", l);
  h.prefix_cache_hits_total = &AddCounter(r, "strata:prefix_cache_hits_total",
                                          "Prefix cache hits, in prompt tokens found.", l);
  h.num_preemptions_total =
      &AddCounter(r, "strata:num_preemptions_total", "Cumulative number of preemptions.", l);
  h.kda_checkpoint_evictions_total =
      &AddCounter(r, "strata:kda_checkpoint_evictions_total",
                  "KDA state checkpoints evicted (least recently used) to make room.", l);
  // vLLM's spec_decode counters: acceptance rate = accepted / draft tokens, mean accepted
  // length = 1 + accepted / drafts.
  h.spec_decode_num_drafts_total =
      &AddCounter(r, "strata:spec_decode_num_drafts_total",
                  "Speculative decoding: sequence steps that verified drafts.", l);
  h.spec_decode_num_draft_tokens_total =
      &AddCounter(r, "strata:spec_decode_num_draft_tokens_total",
                  "Speculative decoding: draft tokens proposed.", l);
  h.spec_decode_num_accepted_tokens_total =
      &AddCounter(r, "strata:spec_decode_num_accepted_tokens_total",
                  "Speculative decoding: draft tokens accepted.", l);

  h.request_success_family = &prometheus::BuildCounter()
                                  .Name("strata:request_success_total")
                                  .Help("Count of finished requests by finish reason.")
                                  .Register(r);
  for (size_t i = 0; i < kKnownFinishReasons.size(); ++i) {
    Labels with_reason = l;
    with_reason.emplace("finished_reason", std::string(kKnownFinishReasons[i]));
    h.request_success[i] = &h.request_success_family->Add(with_reason);
  }

  if (options_.num_experts > 0) {
    auto& family = prometheus::BuildCounter()
                       .Name("strata:expert_routed_tokens_total")
                       .Help("Tokens this rank routed to each routed expert (all MoE layers).")
                       .Register(r);
    for (int e = 0; e < options_.num_experts; ++e) {
      Labels with_expert = l;
      with_expert.emplace("expert", std::to_string(e));
      h.expert_routed_tokens.push_back(&family.Add(with_expert));
    }
    window_.assign(static_cast<size_t>(options_.expert_window_steps) * options_.num_experts, 0);
    window_sums_.assign(options_.num_experts, 0);
  }

  const std::vector<double> latency = LatencyBucketsSeconds();
  const std::vector<double> tokens = TokenCountBuckets();
  h.time_to_first_token = &AddHistogram(r, "strata:time_to_first_token_seconds",
                                        "Histogram of time to first token in seconds.", l, latency);
  h.inter_token_latency = &AddHistogram(r, "strata:inter_token_latency_seconds",
                                        "Histogram of inter-token latency in seconds.", l, latency);
  h.e2e_request_latency =
      &AddHistogram(r, "strata:e2e_request_latency_seconds",
                    "Histogram of end-to-end request latency in seconds.", l, latency);
  h.request_queue_time = &AddHistogram(r, "strata:request_queue_time_seconds",
                                       "Histogram of time spent waiting in the queue.", l, latency);
  h.request_prefill_time = &AddHistogram(r, "strata:request_prefill_time_seconds",
                                         "Histogram of time spent in prefill.", l, latency);
  h.request_decode_time = &AddHistogram(r, "strata:request_decode_time_seconds",
                                        "Histogram of time spent in decode.", l, latency);
  h.step_duration = &AddHistogram(r, "strata:step_duration_seconds",
                                  "Histogram of engine step wall time in seconds.", l, latency);
  h.all_to_all = &AddHistogram(r, "strata:all_to_all_seconds",
                               "Histogram of MoE all-to-all time per engine step in seconds.", l,
                               AllToAllBucketsSeconds());
  h.iteration_tokens = &AddHistogram(r, "strata:iteration_tokens",
                                     "Histogram of tokens run per engine step.", l, tokens);
  h.request_prompt_tokens = &AddHistogram(r, "strata:request_prompt_tokens",
                                          "Histogram of prompt tokens per request.", l, tokens);
  h.request_generation_tokens =
      &AddHistogram(r, "strata:request_generation_tokens",
                    "Histogram of generated tokens per request.", l, tokens);
}

Metrics::~Metrics() = default;

void Metrics::SetGauges(const StepStats& step) {
  Handles& h = *h_;
  h.num_requests_running->Set(static_cast<double>(step.num_running));
  h.num_requests_waiting->Set(static_cast<double>(step.num_waiting));
  h.kv_cache_usage_perc->Set(step.kv_cache_usage);
  h.state_slot_usage_perc->Set(step.state_slot_usage);
  h.kda_checkpoints->Set(static_cast<double>(step.num_kda_checkpoints));
  h.kda_checkpoints_in_state_slots->Set(static_cast<double>(step.num_kda_checkpoints_in_slots));
  h.kda_checkpoint_bytes->Set(static_cast<double>(step.kda_checkpoint_bytes));
  h.prefill_chunk_limit_tokens->Set(static_cast<double>(step.prefill_chunk_limit_tokens));
  h.prefill_tokens_processed->Set(static_cast<double>(step.num_prefill_tokens_computed));
  h.prefill_tokens_remaining->Set(static_cast<double>(step.num_prefill_tokens_remaining));
}

void Metrics::OnStep(const StepStats& step) {
  SetGauges(step);
  Handles& h = *h_;
  const int64_t step_tokens = step.num_prefill_tokens + step.num_decode_tokens;
  h.prompt_tokens_total->Increment(static_cast<double>(step.num_prefill_tokens));
  h.generation_tokens_total->Increment(static_cast<double>(step.num_decode_tokens));
  h.iteration_tokens_total->Increment(static_cast<double>(step_tokens));
  h.prefix_cache_queries_total->Increment(static_cast<double>(step.num_prefix_query_tokens));
  h.prefix_cache_hits_total->Increment(static_cast<double>(step.num_prefix_hit_tokens));
  h.num_preemptions_total->Increment(static_cast<double>(step.num_preemptions));
  h.kda_checkpoint_evictions_total->Increment(
      static_cast<double>(step.num_kda_checkpoint_evictions));
  h.spec_decode_num_drafts_total->Increment(static_cast<double>(step.num_spec_drafts));
  h.spec_decode_num_draft_tokens_total->Increment(static_cast<double>(step.num_spec_draft_tokens));
  h.spec_decode_num_accepted_tokens_total->Increment(
      static_cast<double>(step.num_spec_accepted_tokens));

  h.iteration_tokens->Observe(static_cast<double>(step_tokens));
  h.step_duration->Observe(step.step_seconds);
  ObserveIfSet(*h.all_to_all, step.all_to_all_seconds);
  ObserveExperts(step.expert_tokens);
}

void Metrics::ObserveExperts(std::span<const int64_t> expert_tokens) {
  if (expert_tokens.empty()) return;
  const int n = options_.num_experts;
  CHECK_EQ(static_cast<int64_t>(expert_tokens.size()), n)
      << "StepStats::expert_tokens has one entry per routed expert";
  int64_t* row = &window_[static_cast<size_t>(window_next_) * n];
  int64_t max_sum = 0;
  int64_t total = 0;
  for (int e = 0; e < n; ++e) {
    const int64_t tokens = expert_tokens[e];
    CHECK_GE(tokens, 0);
    if (tokens > 0) h_->expert_routed_tokens[e]->Increment(static_cast<double>(tokens));
    window_sums_[e] += tokens - row[e];
    row[e] = tokens;
    max_sum = std::max(max_sum, window_sums_[e]);
    total += window_sums_[e];
  }
  window_next_ = (window_next_ + 1) % options_.expert_window_steps;
  // max / mean == max * n / total; an idle window counts as balanced.
  const double imbalance =
      total == 0 ? 1.0 : static_cast<double>(max_sum) * n / static_cast<double>(total);
  h_->expert_load_imbalance->Set(imbalance);
}

prometheus::Counter& Metrics::SuccessCounter(std::string_view finished_reason) {
  for (size_t i = 0; i < kKnownFinishReasons.size(); ++i) {
    if (kKnownFinishReasons[i] == finished_reason) return *h_->request_success[i];
  }
  // Rare: a reason added later. Family::Add locks and returns the existing series if any.
  return h_->request_success_family->Add({{"model_name", model_name_},
                                          {"rank", std::to_string(rank_)},
                                          {"finished_reason", std::string(finished_reason)}});
}

void Metrics::OnRequestFinished(const RequestTimings& request) {
  Handles& h = *h_;
  SuccessCounter(request.finished_reason).Increment();
  ObserveIfSet(*h.request_queue_time, request.queue_seconds);
  ObserveIfSet(*h.time_to_first_token, request.ttft_seconds);
  ObserveIfSet(*h.request_prefill_time, request.prefill_seconds);
  ObserveIfSet(*h.request_decode_time, request.decode_seconds);
  h.e2e_request_latency->Observe(request.e2e_seconds);
  h.request_prompt_tokens->Observe(static_cast<double>(request.num_prompt_tokens));
  h.request_generation_tokens->Observe(static_cast<double>(request.num_generation_tokens));

  if (request.inter_token_seconds.empty()) return;
  // One locked update for all of the request's gaps. Bucket i holds (bound[i-1], bound[i]],
  // the last one (+Inf) what exceeds every bound: the same rule as Histogram::Observe.
  static const std::vector<double> kBounds = LatencyBucketsSeconds();
  std::vector<double> increments(kBounds.size() + 1, 0.0);
  double sum = 0.0;
  for (double gap : request.inter_token_seconds) {
    const auto it = std::lower_bound(kBounds.begin(), kBounds.end(), gap);
    increments[static_cast<size_t>(it - kBounds.begin())] += 1.0;
    sum += gap;
  }
  h.inter_token_latency->ObserveMultiple(increments, sum);
}

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace strata::server
