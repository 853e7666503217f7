// Fetching a resource over HTTP(S) for a request (a remote image, docs/vision.md): one GET with
// a deadline over the whole exchange (resolve, connect, TLS, request, response) and a cap on the
// body, no redirects followed. HTTPS verifies the server's certificate against the system's
// trust store and its host name. Blocking: runs its own I/O context on the calling thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace strata::http {

struct HttpUrl {
  bool https = false;
  std::string host;    // lower-cased
  std::string port;    // "80" / "443" unless given
  std::string target;  // path and query, "/" when empty
};

// `http://host[:port][/path]` or `https://...`. InvalidArgument naming what is wrong (scheme,
// empty host, user info, a bad port).
absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url);

struct FetchLimits {
  int64_t max_bytes = int64_t{20} << 20;
  std::chrono::milliseconds timeout{5000};
};

// The body of a 200 response to GET `url`. Errors (InvalidArgument, naming the URL's host and
// the reason): unreachable, timed out (the limit), another status (a redirect included), a body
// over max_bytes (the limit), a TLS failure.
absl::StatusOr<std::string> FetchUrl(const HttpUrl& url, const FetchLimits& limits);

}  // namespace strata::http
