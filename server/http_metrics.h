// Per-process HTTP metrics under vLLM's names (the series its API server exports through
// prometheus-fastapi-instrumentator), so dashboards and alerts written for it work unchanged:
//
//   http_requests_total{handler, method, status}     status grouped by class: "2xx", "4xx", ...
//   http_request_duration_seconds{handler, method}   histogram (LatencyBucketsSeconds)
//   http_response_size_bytes_total{handler}          response body bytes (streams: their data)
//
// and the transport's connection counts (SetConnections, at each scrape):
//
//   strata:http_connections                    connections open and served now
//   strata:http_max_connections                the limit (--max-connections)
//   strata:http_connections_refused_total      connections answered 503 over the limit
//   strata:http_accept_errors_total            failed accept() calls (e.g. out of descriptors)
//
// Every label comes from a fixed set, so that clients cannot grow /metrics: `handler` is the
// route template ("/v1/chat/completions", "/v1/models/{model}"; "none" for a path the server
// does not serve, as prometheus-fastapi-instrumentator), `method` one of GET, POST, PUT,
// DELETE, PATCH, HEAD, OPTIONS or "other" (MethodLabel). Requests turned away before they
// reach the engine (400s, 401s, 429s) show here and nowhere else; 499 (the client left before
// a response) counts as "4xx". Thread-safe: Observe runs on the I/O threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "server/http/http_types.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace strata::server {

// The `method` label of an HTTP method as sent: itself when one of GET, POST, PUT, DELETE,
// PATCH, HEAD, OPTIONS (exactly: methods are case-sensitive), else "other".
std::string_view MethodLabel(std::string_view method);

// The transport's connection counts (http::HttpServerStats' fields of the same names).
struct ConnectionCounts {
  int64_t num_connections = 0;
  int64_t max_connections = 0;
  int64_t num_refused_total = 0;
  int64_t num_accept_errors_total = 0;
};

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
  // Sets the connection series to `counts` (totals only grow: a smaller one is ignored).
  void SetConnections(const ConnectionCounts& counts);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  struct Families;
  const std::function<std::string_view(std::string_view)> route_template_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> f_;
};

}  // namespace strata::server
