// What one benchmark run measured (vLLM's `bench serve` definitions, so numbers compare):
//   TTFT  time to the first streamed token (from the request's send)
//   TPOT  per request, (latency − TTFT) / (output tokens − 1): time per output token after the
//         first (requests with one output token have none)
//   ITL   every gap between consecutive streamed chunks that carry tokens
//   E2EL  the request's whole latency
// Throughputs divide by the run's duration (first send to last completion). Goodput counts the
// requests that met every SLO given (ttft, tpot, e2el in ms).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace strata::bench_serve {

struct RequestRecord {
  bool success = false;
  std::string error;          // when !success: what went wrong
  int64_t prompt_len = 0;     // the server's usage.prompt_tokens (else the dataset's count)
  int64_t output_tokens = 0;  // the server's usage.completion_tokens (else chunks seen)
  double ttft_s = 0.0;
  double latency_s = 0.0;
  std::vector<double> itl_s;  // gaps between token-carrying chunks
};

struct Slo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
};

// numpy's default percentile (linear interpolation between closest ranks); 0 for no values.
double Percentile(std::vector<double> values, double percent);

struct MetricStats {
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (percent, value)
};
MetricStats Stats(const std::vector<double>& values_s, const std::vector<double>& percents);

struct BenchSummary {
  double duration_s = 0;
  int64_t completed = 0, failed = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  std::optional<double> request_goodput;  // with an SLO
  MetricStats ttft, tpot, itl, e2el;
};

// The summary of `records` (failed ones count only as failures).
BenchSummary Summarize(const std::vector<RequestRecord>& records, double duration_s,
                       const std::vector<double>& percents, const Slo& slo);

// vLLM's result JSON fields (mean_ttft_ms, p99_itl_ms, request_goodput, …) plus per-request
// arrays (input_lens, output_lens, ttfts, itls, errors).
nlohmann::json SummaryJson(const BenchSummary& s, const std::vector<RequestRecord>& records);
// The table printed at the end of a run, with the metrics named in `metrics` (ttft, tpot, itl,
// e2el).
std::string SummaryTable(const BenchSummary& s, const std::vector<std::string>& metrics,
                         double request_rate, int64_t max_concurrency);

}  // namespace strata::bench_serve
