// Cross-origin resource sharing for browser clients (a web UI calling the API directly), with
// the defaults and flags of vLLM's server (FastAPI's CORSMiddleware): any origin, method and
// header is allowed unless the lists say otherwise; credentials off.
//
// A request with an `Origin` header from an allowed origin gets `Access-Control-Allow-Origin`
// on its response (streamed or not): `*` when every origin is allowed and credentials are off,
// else the origin itself (with `Vary: Origin`). A preflight — OPTIONS with `Origin` and
// `Access-Control-Request-Method` — is answered by the transport itself: 200 with the allowed
// methods and headers (max age 600 s), or 400 naming a disallowed origin, method or header.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/http_types.h"

namespace strata::http {

struct CorsOptions {
  std::vector<std::string> allowed_origins = {"*"};  // "*": any; empty: no CORS at all
  std::vector<std::string> allowed_methods = {"*"};
  std::vector<std::string> allowed_headers = {"*"};
  bool allow_credentials = false;
};

// The CORS headers of a response to a request from `origin` (none when it is not allowed).
std::vector<Header> CorsResponseHeaders(const CorsOptions& options, std::string_view origin);

// The response to a CORS preflight, or nullopt when `request` is not one.
std::optional<HttpResponse> CorsPreflight(const CorsOptions& options, const HttpRequest& request);

}  // namespace strata::http
