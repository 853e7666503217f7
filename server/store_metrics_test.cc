#include "server/store_metrics.h"

#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "prometheus/registry.h"
#include "server/exposition_text_testing.h"

namespace strata::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(StoreMetricsTest, GaugesFollowTheStoresAndEveryBatchStatusIsExported) {
  prometheus::Registry registry;
  StoreMetrics metrics(registry, /*batches_on=*/true, /*responses_on=*/true);
  metrics.Set({.batches_by_status = {{"in_progress", 2}, {"completed", 5}},
               .requests_pending = 37,
               .files_bytes = 4096,
               .files_capacity_bytes = 1 << 30},
              {.stored = 3, .bytes = 900, .capacity_bytes = 1 << 20, .background_running = 1});
  const std::string text = ExpositionText(registry);
  EXPECT_THAT(text, AllOf(HasSubstr("strata:batches{status=\"in_progress\"} 2\n"),
                          HasSubstr("strata:batches{status=\"completed\"} 5\n"),
                          HasSubstr("strata:batches{status=\"expired\"} 0\n"),
                          HasSubstr("strata:batches{status=\"validating\"} 0\n"),
                          HasSubstr("strata:batch_requests_pending 37\n"),
                          HasSubstr("strata:files_bytes 4096\n"),
                          HasSubstr("strata:files_capacity_bytes 1073741824\n"),
                          HasSubstr("strata:stored_responses 3\n"),
                          HasSubstr("strata:stored_responses_bytes 900\n"),
                          HasSubstr("strata:stored_responses_capacity_bytes 1048576\n"),
                          HasSubstr("strata:background_responses_running 1\n")));
  // A later scrape: a status that emptied goes back to 0.
  metrics.Set({.batches_by_status = {{"completed", 7}}}, {});
  EXPECT_THAT(ExpositionText(registry),
              AllOf(HasSubstr("strata:batches{status=\"in_progress\"} 0\n"),
                    HasSubstr("strata:batches{status=\"completed\"} 7\n"),
                    HasSubstr("strata:batch_requests_pending 0\n"),
                    HasSubstr("strata:background_responses_running 0\n")));
}

TEST(StoreMetricsTest, AStoreThatIsOffExportsNothing) {
  prometheus::Registry registry;
  StoreMetrics metrics(registry, /*batches_on=*/false, /*responses_on=*/true);
  metrics.Set({.batches_by_status = {{"completed", 1}}, .requests_pending = 4}, {.stored = 2});
  const std::string text = ExpositionText(registry);
  EXPECT_THAT(text, AllOf(HasSubstr("strata:stored_responses 2\n"), Not(HasSubstr("batch")),
                          Not(HasSubstr("files_"))));
  prometheus::Registry none;
  StoreMetrics off(none, false, false);
  off.Set({.requests_pending = 1}, {.stored = 1});
  EXPECT_EQ(ExpositionText(none), "");
}

}  // namespace
}  // namespace strata::server
