// The benchmark's datasets and arrival processes.
#include "clients/bench_serve/workload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>

namespace strata::bench_serve {
namespace {

TEST(BenchWorkloadTest, RandomRequestsHaveTheLengthsAskedForAndRepeatWithTheSeed) {
  RandomDataset d;
  d.num_prompts = 200;
  d.input_len = 100;
  d.output_len = 20;
  d.range_ratio = 0.5;
  d.prefix_len = 7;
  d.vocab_size = 50;
  d.seed = 3;
  const auto a = RandomRequests(d);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->size(), 200u);
  int64_t min_in = 1 << 30, max_in = 0;
  for (const BenchRequest& r : *a) {
    EXPECT_EQ(r.prompt_len, static_cast<int64_t>(r.prompt_ids.size()));
    min_in = std::min(min_in, r.prompt_len - 7);
    max_in = std::max(max_in, r.prompt_len - 7);
    EXPECT_GE(r.output_len, 10);
    EXPECT_LE(r.output_len, 30);
    for (int32_t t : r.prompt_ids) EXPECT_TRUE(t >= 0 && t < 50);
    EXPECT_TRUE(
        std::equal(r.prompt_ids.begin(), r.prompt_ids.begin() + 7, (*a)[0].prompt_ids.begin()))
        << "the shared prefix";
  }
  EXPECT_GE(min_in, 50);
  EXPECT_LE(max_in, 150);
  EXPECT_LT(min_in, 60) << "lengths spread over the range";
  EXPECT_GT(max_in, 140);
  const auto b = RandomRequests(d);
  EXPECT_EQ((*a)[17].prompt_ids, (*b)[17].prompt_ids);
  d.seed = 4;
  EXPECT_NE((*a)[17].prompt_ids, (*RandomRequests(d))[17].prompt_ids);

  d.range_ratio = 1.0;
  EXPECT_NE(RandomRequests(d).status().message().find("[0, 1)"), std::string::npos);
  d.range_ratio = 0;
  d.vocab_size = 1;
  EXPECT_FALSE(RandomRequests(d).ok());
}

TEST(BenchWorkloadTest, PoissonArrivalsHaveTheRateAndBurstinessChangesOnlyTheSpread) {
  const std::vector<double> inf = ArrivalTimes(5, std::numeric_limits<double>::infinity(), 1.0, 0);
  EXPECT_EQ(inf, std::vector<double>(5, 0.0));
  for (double burstiness : {0.5, 1.0, 4.0}) {
    const std::vector<double> t = ArrivalTimes(20000, 8.0, burstiness, 1);
    EXPECT_EQ(t[0], 0.0);
    EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
    const double mean_gap = t.back() / static_cast<double>(t.size() - 1);
    EXPECT_NEAR(mean_gap, 0.125, 0.125 * 0.05) << "burstiness " << burstiness;
    // The gaps' coefficient of variation is 1/sqrt(burstiness) for a gamma process.
    double var = 0;
    for (size_t i = 1; i < t.size(); ++i) var += std::pow(t[i] - t[i - 1] - mean_gap, 2);
    const double cv = std::sqrt(var / static_cast<double>(t.size() - 1)) / mean_gap;
    EXPECT_NEAR(cv, 1.0 / std::sqrt(burstiness), 0.05) << "burstiness " << burstiness;
  }
  EXPECT_EQ(ArrivalTimes(100, 3.0, 1.0, 9), ArrivalTimes(100, 3.0, 1.0, 9));
}

TEST(BenchWorkloadTest, ShareGptKeepsFirstTurnsThatFitAndNamesAnUnusableFile) {
  const std::string path = ::testing::TempDir() + "/sharegpt.json";
  {
    std::ofstream f(path);
    f << R"([
      {"conversations": [{"from": "human", "value": "one two three four five"},
                         {"from": "gpt", "value": "a b c"}]},
      {"conversations": [{"from": "human", "value": "too short"},
                         {"from": "gpt", "value": "x"}]},
      {"conversations": [{"from": "human", "value": "w w w w w w w w w w"},
                         {"from": "gpt", "value": "long reply"}]},
      {"conversations": [{"from": "human", "value": "only one turn here"}]},
      {"id": "no conversations"}
    ])";
  }
  auto words = [](const std::string& text) -> absl::StatusOr<int64_t> {
    return 1 + static_cast<int64_t>(std::count(text.begin(), text.end(), ' '));
  };
  ShareGptDataset d;
  d.path = path;
  d.max_total_len = 12;
  auto r = ShareGptRequests(d, words);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);  // "too short" has 2 tokens; the one-turn conversation is skipped
  for (const BenchRequest& q : *r) {
    EXPECT_GE(q.prompt_len, 4);
    EXPECT_LE(q.prompt_len + q.output_len, 12);
    EXPECT_TRUE(q.prompt_ids.empty());
  }
  d.fixed_output_len = 7;
  d.num_prompts = 1;
  r = ShareGptRequests(d, words);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].output_len, 7);

  d.max_total_len = 3;
  EXPECT_NE(ShareGptRequests(d, words).status().message().find("no conversation"),
            std::string::npos);
  d.path = ::testing::TempDir() + "/missing.json";
  EXPECT_NE(ShareGptRequests(d, words).status().message().find("cannot read"), std::string::npos);
}

}  // namespace
}  // namespace strata::bench_serve
