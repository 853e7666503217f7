#include "server/http_metrics.h"

#include <mutex>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metrics.h"

namespace strata::server {

struct HttpMetrics::Families {
  prometheus::Family<prometheus::Counter>* requests;
  prometheus::Family<prometheus::Histogram>* duration;
  prometheus::Family<prometheus::Counter>* response_bytes;
  std::vector<double> buckets = LatencyBucketsSeconds();
  prometheus::Gauge* connections;
  prometheus::Gauge* max_connections;
  prometheus::Counter* refused;
  prometheus::Counter* accept_errors;
  std::mutex connections_mu;  // SetConnections: read-then-increment of the counters
};

std::string_view MethodLabel(std::string_view method) {
  static constexpr std::string_view kMethods[] = {"GET",   "POST", "PUT",    "DELETE",
                                                  "PATCH", "HEAD", "OPTIONS"};
  for (std::string_view known : kMethods) {
    if (method == known) return known;
  }
  return "other";
}

namespace {

// Raises `counter` to `total` (a counter mirrors a running total kept elsewhere).
void AdvanceTo(prometheus::Counter& counter, int64_t total) {
  const double delta = static_cast<double>(total) - counter.Value();
  if (delta > 0) counter.Increment(delta);
}

}  // namespace

HttpMetrics::HttpMetrics(std::function<std::string_view(std::string_view path)> route_template,
                         std::shared_ptr<prometheus::Registry> registry)
    : route_template_(std::move(route_template)),
      registry_(registry != nullptr ? std::move(registry)
                                    : std::make_shared<prometheus::Registry>()),
      f_(std::make_unique<Families>()) {
  f_->requests = &prometheus::BuildCounter()
                      .Name("http_requests_total")
                      .Help("HTTP requests by route template, method and status class")
                      .Register(*registry_);
  f_->duration = &prometheus::BuildHistogram()
                      .Name("http_request_duration_seconds")
                      .Help("Seconds from a request read to its response written")
                      .Register(*registry_);
  f_->response_bytes = &prometheus::BuildCounter()
                            .Name("http_response_size_bytes_total")
                            .Help("Response body bytes written, by route template")
                            .Register(*registry_);
  f_->connections = &prometheus::BuildGauge()
                         .Name("strata:http_connections")
                         .Help("HTTP connections open and served now")
                         .Register(*registry_)
                         .Add({});
  f_->max_connections = &prometheus::BuildGauge()
                             .Name("strata:http_max_connections")
                             .Help("HTTP connections open at most (--max-connections)")
                             .Register(*registry_)
                             .Add({});
  f_->refused = &prometheus::BuildCounter()
                     .Name("strata:http_connections_refused_total")
                     .Help("HTTP connections answered 503 and closed over --max-connections")
                     .Register(*registry_)
                     .Add({});
  f_->accept_errors = &prometheus::BuildCounter()
                           .Name("strata:http_accept_errors_total")
                           .Help("Failed accept() calls (e.g. out of file descriptors)")
                           .Register(*registry_)
                           .Add({});
}

HttpMetrics::~HttpMetrics() = default;

void HttpMetrics::Observe(const http::ExchangeRecord& exchange) {
  const std::string handler(route_template_(exchange.path));
  const std::string method(MethodLabel(exchange.method));
  const std::string status = std::to_string(exchange.status / 100) + "xx";
  f_->requests->Add({{"handler", handler}, {"method", method}, {"status", status}}).Increment();
  f_->duration->Add({{"handler", handler}, {"method", method}}, f_->buckets)
      .Observe(exchange.seconds);
  f_->response_bytes->Add({{"handler", handler}})
      .Increment(static_cast<double>(exchange.response_bytes));
}

void HttpMetrics::SetConnections(const ConnectionCounts& counts) {
  std::lock_guard<std::mutex> lock(f_->connections_mu);
  f_->connections->Set(static_cast<double>(counts.num_connections));
  f_->max_connections->Set(static_cast<double>(counts.max_connections));
  AdvanceTo(*f_->refused, counts.num_refused_total);
  AdvanceTo(*f_->accept_errors, counts.num_accept_errors_total);
}

}  // namespace strata::server
