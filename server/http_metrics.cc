#include "server/http_metrics.h"

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metrics.h"

namespace strata::server {

struct HttpMetrics::Families {
  prometheus::Family<prometheus::Counter>* requests;
  prometheus::Family<prometheus::Histogram>* duration;
  prometheus::Family<prometheus::Counter>* response_bytes;
  std::vector<double> buckets = LatencyBucketsSeconds();
};

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
}

HttpMetrics::~HttpMetrics() = default;

void HttpMetrics::Observe(const http::ExchangeRecord& exchange) {
  const std::string handler(route_template_(exchange.path));
  const std::string method(exchange.method);
  const std::string status = std::to_string(exchange.status / 100) + "xx";
  f_->requests->Add({{"handler", handler}, {"method", method}, {"status", status}}).Increment();
  f_->duration->Add({{"handler", handler}, {"method", method}}, f_->buckets)
      .Observe(exchange.seconds);
  f_->response_bytes->Add({{"handler", handler}})
      .Increment(static_cast<double>(exchange.response_bytes));
}

}  // namespace strata::server
