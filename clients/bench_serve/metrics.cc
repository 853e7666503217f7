#include "clients/bench_serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata::bench_serve {
namespace {

// "99" for 99.0, "99.9" for 99.9 (vLLM's p{n} key names).
std::string PercentName(double p) {
  return p == std::floor(p) ? absl::StrCat(static_cast<int64_t>(p)) : absl::StrCat(p);
}

double Tpot(const RequestRecord& r) {
  return (r.latency_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
}

}  // namespace

double Percentile(std::vector<double> values, double percent) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank =
      std::clamp(percent, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

MetricStats Stats(const std::vector<double>& values_s, const std::vector<double>& percents) {
  MetricStats s;
  if (!values_s.empty()) {
    const double n = static_cast<double>(values_s.size());
    const double mean = std::accumulate(values_s.begin(), values_s.end(), 0.0) / n;
    double var = 0.0;
    for (double v : values_s) var += (v - mean) * (v - mean);
    s.mean_ms = mean * 1e3;
    s.std_ms = std::sqrt(var / n) * 1e3;  // population deviation, as numpy.std
    s.median_ms = Percentile(values_s, 50) * 1e3;
  }
  for (double p : percents) s.percentiles_ms.emplace_back(p, Percentile(values_s, p) * 1e3);
  return s;
}

BenchSummary Summarize(const std::vector<RequestRecord>& records, double duration_s,
                       const std::vector<double>& percents, const Slo& slo) {
  BenchSummary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  int64_t good = 0;
  for (const RequestRecord& r : records) {
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_len;
    s.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s);
    e2el.push_back(r.latency_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    if (r.output_tokens > 1) tpot.push_back(Tpot(r));
    const bool met = (!slo.ttft_ms || r.ttft_s * 1e3 <= *slo.ttft_ms) &&
                     (!slo.tpot_ms || r.output_tokens <= 1 || Tpot(r) * 1e3 <= *slo.tpot_ms) &&
                     (!slo.e2el_ms || r.latency_s * 1e3 <= *slo.e2el_ms);
    good += met ? 1 : 0;
  }
  if (duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
    s.total_token_throughput =
        static_cast<double>(s.total_input_tokens + s.total_output_tokens) / duration_s;
    if (!slo.empty()) s.request_goodput = static_cast<double>(good) / duration_s;
  }
  s.ttft = Stats(ttft, percents);
  s.tpot = Stats(tpot, percents);
  s.itl = Stats(itl, percents);
  s.e2el = Stats(e2el, percents);
  return s;
}

nlohmann::json SummaryJson(const BenchSummary& s, const std::vector<RequestRecord>& records) {
  nlohmann::json j;
  j["duration"] = s.duration_s;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput"] = s.request_throughput;
  j["request_goodput"] = s.request_goodput ? nlohmann::json(*s.request_goodput) : nlohmann::json();
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  for (const auto& [name, m] : {std::pair<const char*, const MetricStats*>{"ttft", &s.ttft},
                                {"tpot", &s.tpot},
                                {"itl", &s.itl},
                                {"e2el", &s.e2el}}) {
    j[absl::StrCat("mean_", name, "_ms")] = m->mean_ms;
    j[absl::StrCat("median_", name, "_ms")] = m->median_ms;
    j[absl::StrCat("std_", name, "_ms")] = m->std_ms;
    for (const auto& [p, v] : m->percentiles_ms) {
      j[absl::StrCat("p", PercentName(p), "_", name, "_ms")] = v;
    }
  }
  nlohmann::json input_lens = nlohmann::json::array(), output_lens = nlohmann::json::array(),
                 ttfts = nlohmann::json::array(), itls = nlohmann::json::array(),
                 errors = nlohmann::json::array();
  for (const RequestRecord& r : records) {
    input_lens.push_back(r.prompt_len);
    output_lens.push_back(r.success ? r.output_tokens : 0);
    ttfts.push_back(r.success ? r.ttft_s : 0.0);
    itls.push_back(r.itl_s);
    errors.push_back(r.error);
  }
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::move(output_lens);
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  j["errors"] = std::move(errors);
  return j;
}

std::string SummaryTable(const BenchSummary& s, const std::vector<std::string>& metrics,
                         double request_rate, int64_t max_concurrency) {
  std::string out = "============ Serving Benchmark Result ============\n";
  auto row = [&out](const std::string& name, const std::string& value) {
    absl::StrAppendFormat(&out, "%-40s%10s\n", name, value);
  };
  auto num = [](double v) { return absl::StrFormat("%.2f", v); };
  row("Request rate (req/s):",
      std::isinf(request_rate) || request_rate <= 0 ? "inf" : num(request_rate));
  row("Max request concurrency:", max_concurrency > 0 ? absl::StrCat(max_concurrency) : "none");
  row("Successful requests:", absl::StrCat(s.completed));
  row("Failed requests:", absl::StrCat(s.failed));
  row("Benchmark duration (s):", num(s.duration_s));
  row("Total input tokens:", absl::StrCat(s.total_input_tokens));
  row("Total generated tokens:", absl::StrCat(s.total_output_tokens));
  row("Request throughput (req/s):", num(s.request_throughput));
  if (s.request_goodput) row("Request goodput (req/s):", num(*s.request_goodput));
  row("Output token throughput (tok/s):", num(s.output_throughput));
  row("Total token throughput (tok/s):", num(s.total_token_throughput));
  const struct {
    const char* key;
    const char* title;
    const char* label;
    const MetricStats* m;
  } kinds[] = {{"ttft", "Time to First Token", "TTFT", &s.ttft},
               {"tpot", "Time per Output Token (excl. 1st token)", "TPOT", &s.tpot},
               {"itl", "Inter-token Latency", "ITL", &s.itl},
               {"e2el", "End-to-end Latency", "E2EL", &s.e2el}};
  for (const auto& k : kinds) {
    if (std::find(metrics.begin(), metrics.end(), k.key) == metrics.end()) continue;
    const std::string title = absl::StrCat(" ", k.title, " ");  // under 50 characters
    const size_t pad = (50 - title.size()) / 2;
    out += std::string(pad, '-') + title + std::string(50 - pad - title.size(), '-') + "\n";
    row(absl::StrCat("Mean ", k.label, " (ms):"), num(k.m->mean_ms));
    row(absl::StrCat("Median ", k.label, " (ms):"), num(k.m->median_ms));
    for (const auto& [p, v] : k.m->percentiles_ms) {
      if (p == 50) continue;  // the median, above (the JSON has both)
      row(absl::StrCat("P", PercentName(p), " ", k.label, " (ms):"), num(v));
    }
  }
  out += std::string(50, '=') + "\n";
  return out;
}

}  // namespace strata::bench_serve
