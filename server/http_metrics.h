// Per-process HTTP metrics under vLLM's names (the series its API server exports through
// prometheus-fastapi-instrumentator), so dashboards and alerts written for it work unchanged:
//
//   http_requests_total{handler, method, status}     status grouped by class: "2xx", "4xx", ...
//   http_request_duration_seconds{handler, method}   histogram (LatencyBucketsSeconds)
//   http_response_size_bytes_total{handler}          response body bytes (streams: their data)
//
// `handler` is the route template ("/v1/chat/completions", "/v1/models/{model}"; "none" for
// a path the server does not serve, so scanners cannot grow the label set). Requests turned
// away before they reach the engine (400s, 401s, 429s) show here and nowhere else; 499 (the
// client left before a response) counts as "4xx". Thread-safe: Observe runs on the I/O threads.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "server/http/http_types.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace strata::server {

class HttpMetrics {
 public:
  // `route_template` maps a path to its handler label. The series go into `registry`, or a
  // registry of its own when null (registry(): give it to the engine's Metrics so /metrics
  // serializes both).
  HttpMetrics(std::function<std::string_view(std::string_view path)> route_template,
              std::shared_ptr<prometheus::Registry> registry = nullptr);
  ~HttpMetrics();
  HttpMetrics(const HttpMetrics&) = delete;
  HttpMetrics& operator=(const HttpMetrics&) = delete;

  void Observe(const http::ExchangeRecord& exchange);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  struct Families;
  const std::function<std::string_view(std::string_view)> route_template_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> f_;
};

}  // namespace strata::server
