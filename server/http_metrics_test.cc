#include "server/http_metrics.h"

#include <algorithm>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "prometheus/registry.h"
#include "server/exposition_text_testing.h"

namespace strata::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Paths map to templates as the front end's RouteTemplate does; unknown ones to "none".
std::string_view Route(std::string_view path) {
  if (path == "/v1/chat/completions") return path;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{model}";
  return "none";
}

http::ExchangeRecord Exchange(std::string_view method, std::string_view path, int status,
                              double seconds, int64_t response_bytes) {
  return {.method = method,
          .path = path,
          .status = status,
          .seconds = seconds,
          .request_bytes = 10,
          .response_bytes = response_bytes};
}

TEST(HttpMetrics, CountsByRouteTemplateMethodAndStatusClass) {
  HttpMetrics metrics(Route);
  metrics.Observe(Exchange("POST", "/v1/chat/completions", 200, 0.004, 100));
  metrics.Observe(Exchange("POST", "/v1/chat/completions", 201, 0.3, 50));
  metrics.Observe(Exchange("POST", "/v1/chat/completions", 429, 0.001, 7));
  metrics.Observe(Exchange("POST", "/v1/chat/completions", 499, 2.0, 0));
  metrics.Observe(Exchange("GET", "/v1/models/a", 200, 0.001, 3));
  metrics.Observe(Exchange("GET", "/v1/models/b", 404, 0.001, 3));
  metrics.Observe(Exchange("GET", "/wp-admin/x.php", 404, 0.001, 3));
  metrics.Observe(Exchange("GET", "/.env", 404, 0.001, 3));
  const std::string text = ExpositionText(*metrics.registry());
  EXPECT_THAT(text, HasSubstr("http_requests_total{handler=\"/v1/chat/completions\","
                              "method=\"POST\",status=\"2xx\"} 2\n"));
  // 429 and the client gone (499) are both client-side classes.
  EXPECT_THAT(text, HasSubstr("http_requests_total{handler=\"/v1/chat/completions\","
                              "method=\"POST\",status=\"4xx\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("http_requests_total{handler=\"/v1/models/{model}\","
                              "method=\"GET\",status=\"2xx\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("http_requests_total{handler=\"/v1/models/{model}\","
                              "method=\"GET\",status=\"4xx\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("http_requests_total{handler=\"none\",method=\"GET\",status=\"4xx\"} 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("wp-admin")));
  EXPECT_THAT(text, HasSubstr("http_request_duration_seconds_count{handler=\"/v1/chat/"
                              "completions\",method=\"POST\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("http_request_duration_seconds_bucket{handler=\"/v1/chat/"
                              "completions\",method=\"POST\",le=\"0.005\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("http_response_size_bytes_total{handler=\"/v1/chat/"
                              "completions\"} 157\n"));
}

TEST(HttpMetrics, MethodLabelIsFromAFixedSet) {
  for (std::string_view m : {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}) {
    EXPECT_EQ(MethodLabel(m), m);
  }
  EXPECT_EQ(MethodLabel("get"), "other");  // methods are case-sensitive
  EXPECT_EQ(MethodLabel("PROPFIND"), "other");
  EXPECT_EQ(MethodLabel(""), "other");
}

// Issue 50: each invented method became a series, so a client could grow /metrics (and the
// process) without bound. 5,000 invented methods on served and unknown paths now add nothing
// once "other" exists.
TEST(HttpMetrics, InventedMethodsAndPathsDoNotGrowTheExposition) {
  HttpMetrics metrics(Route);
  metrics.Observe(Exchange("GET", "/v1/chat/completions", 200, 0.01, 1));
  metrics.Observe(Exchange("XYZZY", "/v1/chat/completions", 405, 0.01, 1));
  metrics.Observe(Exchange("XYZZY", "/nope", 404, 0.01, 1));
  const std::string before = ExpositionText(*metrics.registry());
  for (int i = 0; i < 5000; ++i) {
    std::string method = "M", path = "/scan/";  // (not "M" + ...: GCC 12's -Wrestrict)
    method += std::to_string(i);
    path += std::to_string(i);
    metrics.Observe(Exchange(method, i % 2 == 0 ? "/v1/chat/completions" : path, 405, 0.01, 1));
  }
  const std::string after = ExpositionText(*metrics.registry());
  EXPECT_EQ(std::count(after.begin(), after.end(), '\n'),
            std::count(before.begin(), before.end(), '\n'));
  EXPECT_LT(after.size(), before.size() + 1024);  // only counts and sums grew a few digits
  EXPECT_THAT(after, Not(HasSubstr("M4999")));
  EXPECT_THAT(after, HasSubstr("http_requests_total{handler=\"/v1/chat/completions\","
                               "method=\"other\",status=\"4xx\"} 2501\n"));
  EXPECT_THAT(after, HasSubstr("http_requests_total{handler=\"none\",method=\"other\","
                               "status=\"4xx\"} 2501\n"));
}

TEST(HttpMetrics, ConnectionCountsAreExported) {
  HttpMetrics metrics(Route);
  metrics.SetConnections({.num_connections = 3,
                          .max_connections = 768,
                          .num_refused_total = 5,
                          .num_accept_errors_total = 2});
  metrics.SetConnections({.num_connections = 1,
                          .max_connections = 768,
                          .num_refused_total = 7,
                          .num_accept_errors_total = 2});
  const std::string text = ExpositionText(*metrics.registry());
  EXPECT_THAT(text, HasSubstr("strata:http_connections 1\n"));
  EXPECT_THAT(text, HasSubstr("strata:http_max_connections 768\n"));
  EXPECT_THAT(text, HasSubstr("strata:http_connections_refused_total 7\n"));
  EXPECT_THAT(text, HasSubstr("strata:http_accept_errors_total 2\n"));
}

TEST(HttpMetrics, SharesARegistryGivenToIt) {
  auto registry = std::make_shared<prometheus::Registry>();
  HttpMetrics metrics(Route, registry);
  EXPECT_EQ(metrics.registry(), registry);
  metrics.Observe(Exchange("GET", "/x", 500, 0.1, 1));
  EXPECT_THAT(ExpositionText(*registry),
              HasSubstr("http_requests_total{handler=\"none\",method=\"GET\",status=\"5xx\"} 1"));
}

}  // namespace
}  // namespace strata::server
