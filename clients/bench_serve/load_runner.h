// The load generator's network side: a benchmark's requests sent to an OpenAI-compatible
// server at their arrival times over HTTP/1.1 (one connection per request), streamed back as
// Server-Sent Events and timed as they arrive. One thread, one Asio io_context (Asio lives in
// load_runner.cc only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/bench_serve/metrics.h"
#include "clients/bench_serve/workload.h"
#include "nlohmann/json.hpp"

namespace strata::bench_serve {

struct Target {
  std::string host = "127.0.0.1";
  std::string port = "8000";
  std::string api_key;  // non-empty: "Authorization: Bearer <key>"
};

// "http://host:port" (a trailing path is ignored: endpoints are given separately). https is
// refused (no TLS here).
absl::StatusOr<Target> ParseBaseUrl(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;
};
// One blocking request (set-up calls: /v1/models, /tokenize, …), `body` sent as JSON when
// non-empty. Errors: cannot connect, malformed response, timeout.
absl::StatusOr<HttpReply> HttpCall(const Target& target, const std::string& method,
                                   const std::string& path, const std::string& body,
                                   double timeout_s = 60.0);

struct LoadOptions {
  Target target;
  std::string endpoint = "/v1/completions";  // or "/v1/chat/completions"
  std::string model;
  int64_t max_concurrency = 0;   // > 0: at most this many requests in flight
  nlohmann::json extra_body;     // fields added to every request (temperature, ignore_eos, …)
  double request_timeout_s = 0;  // > 0: a request still running after this fails
};

struct LoadResult {
  std::vector<RequestRecord> records;  // one per request, in request order
  double duration_s = 0;               // first send to last completion
};

// The request body for `r` (streaming, usage included, max_tokens = r.output_len).
nlohmann::json RequestBody(const LoadOptions& options, const BenchRequest& r);

// Sends requests[i] at arrivals_s[i] after the start (later when max_concurrency requests are
// in flight), and times every response.
LoadResult RunLoad(const LoadOptions& options, const std::vector<BenchRequest>& requests,
                   const std::vector<double>& arrivals_s);

}  // namespace strata::bench_serve
