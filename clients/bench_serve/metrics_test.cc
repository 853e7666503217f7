// The benchmark's statistics against hand-computed values (numpy's percentile definition).
#include "clients/bench_serve/metrics.h"

#include <gtest/gtest.h>

namespace strata::bench_serve {
namespace {

TEST(BenchMetricsTest, PercentilesInterpolateLinearlyBetweenRanks) {
  EXPECT_EQ(Percentile({}, 50), 0.0);
  EXPECT_EQ(Percentile({7}, 99), 7.0);
  // numpy.percentile([1, 2, 3, 4], [50, 90, 99]) = 2.5, 3.7, 3.97
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 90), 3.7);
  EXPECT_NEAR(Percentile({4, 1, 3, 2}, 99), 3.97, 1e-12);
  EXPECT_EQ(Percentile({1, 2, 3}, 0), 1.0);
  EXPECT_EQ(Percentile({1, 2, 3}, 100), 3.0);
}

RequestRecord Done(double ttft, double latency, int64_t tokens, std::vector<double> itl) {
  RequestRecord r;
  r.success = true;
  r.prompt_len = 10;
  r.output_tokens = tokens;
  r.ttft_s = ttft;
  r.latency_s = latency;
  r.itl_s = std::move(itl);
  return r;
}

TEST(BenchMetricsTest, SummaryFollowsVllmDefinitionsAndGoodputCountsRequestsMeetingEverySlo) {
  std::vector<RequestRecord> records = {
      Done(0.1, 1.1, 11, {0.1, 0.1}),  // TPOT (1.1 − 0.1) / 10 = 100 ms
      Done(0.3, 0.7, 5, {0.1}),        // TPOT 100 ms, TTFT 300 ms
      Done(0.2, 0.2, 1, {}),           // one token: no TPOT
  };
  RequestRecord failed;
  failed.error = "HTTP 400: too long";
  records.push_back(failed);
  Slo slo;
  slo.ttft_ms = 250;
  const BenchSummary s = Summarize(records, 2.0, {50, 99}, slo);
  EXPECT_EQ(s.completed, 3);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.total_input_tokens, 30);
  EXPECT_EQ(s.total_output_tokens, 17);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(s.output_throughput, 8.5);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 23.5);
  ASSERT_TRUE(s.request_goodput.has_value());
  EXPECT_DOUBLE_EQ(*s.request_goodput, 1.0);  // requests 1 and 3 meet TTFT ≤ 250 ms
  EXPECT_NEAR(s.ttft.mean_ms, 200, 1e-9);
  EXPECT_NEAR(s.ttft.median_ms, 200, 1e-9);
  EXPECT_NEAR(s.tpot.mean_ms, 100, 1e-9);
  EXPECT_NEAR(s.itl.median_ms, 100, 1e-9);
  EXPECT_NEAR(s.e2el.percentiles_ms.at(1).second, 1.092 * 1e3, 1e-6);  // p99 of 0.2, 0.7, 1.1
  slo = Slo();
  slo.tpot_ms = 50;
  EXPECT_DOUBLE_EQ(*Summarize(records, 2.0, {50}, slo).request_goodput, 0.5);  // only the 1-token
  EXPECT_FALSE(Summarize(records, 2.0, {50}, Slo()).request_goodput.has_value());

  const nlohmann::json j = SummaryJson(s, records);
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["p99_ttft_ms"].get<double>(), s.ttft.percentiles_ms.at(1).second);
  EXPECT_TRUE(j.contains("p50_itl_ms"));
  EXPECT_EQ(j["errors"][3], "HTTP 400: too long");
  EXPECT_EQ(j["output_lens"], nlohmann::json({11, 5, 1, 0}));
  const std::string table = SummaryTable(s, {"ttft", "e2el"}, 4.0, 0);
  EXPECT_NE(table.find("Request goodput (req/s):"), std::string::npos);
  EXPECT_NE(table.find("P99 TTFT (ms):"), std::string::npos);
  EXPECT_EQ(table.find("P50 TTFT"), std::string::npos) << "the median is printed once";
  EXPECT_NE(table.find("Median E2EL (ms):"), std::string::npos);
  EXPECT_EQ(table.find("TPOT"), std::string::npos);
}

}  // namespace
}  // namespace strata::bench_serve
