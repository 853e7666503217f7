#include "server/http/cors.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace strata::http {
namespace {

constexpr char kAnyMethods[] = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT";
// Always allowed (CORS-safelisted request headers).
constexpr absl::string_view kSafelistedHeaders[] = {"accept", "accept-language", "content-language",
                                                    "content-type"};

bool Contains(const std::vector<std::string>& list, absl::string_view value, bool ignore_case) {
  return std::any_of(list.begin(), list.end(), [&](const std::string& item) {
    return item == value || (ignore_case && absl::EqualsIgnoreCase(item, value));
  });
}

bool AnyAllowed(const std::vector<std::string>& list) { return Contains(list, "*", false); }

bool OriginAllowed(const CorsOptions& o, std::string_view origin) {
  return AnyAllowed(o.allowed_origins) ||
         Contains(o.allowed_origins, absl::string_view(origin.data(), origin.size()), false);
}

HttpResponse Rejected(const std::string& what) {
  HttpResponse response;
  response.status = 400;
  response.content_type = "text/plain; charset=utf-8";
  response.body = absl::StrCat("Disallowed CORS ", what);
  return response;
}

}  // namespace

std::vector<Header> CorsResponseHeaders(const CorsOptions& o, std::string_view origin) {
  std::vector<Header> headers;
  if (origin.empty() || !OriginAllowed(o, origin)) return headers;
  if (AnyAllowed(o.allowed_origins) && !o.allow_credentials) {
    headers.push_back({"Access-Control-Allow-Origin", "*"});
  } else {
    headers.push_back({"Access-Control-Allow-Origin", std::string(origin)});
    headers.push_back({"Vary", "Origin"});
  }
  if (o.allow_credentials) headers.push_back({"Access-Control-Allow-Credentials", "true"});
  return headers;
}

std::optional<HttpResponse> CorsPreflight(const CorsOptions& o, const HttpRequest& request) {
  const std::string* origin = request.FindHeader("origin");
  const std::string* method = request.FindHeader("access-control-request-method");
  if (request.method != "OPTIONS" || origin == nullptr || method == nullptr) return std::nullopt;
  if (!OriginAllowed(o, *origin)) return Rejected(absl::StrCat("origin '", *origin, "'"));
  if (!AnyAllowed(o.allowed_methods) && !Contains(o.allowed_methods, *method, true)) {
    return Rejected(absl::StrCat("method '", *method, "'"));
  }
  const std::string* requested = request.FindHeader("access-control-request-headers");
  std::string allow_headers;
  if (AnyAllowed(o.allowed_headers)) {
    allow_headers = requested != nullptr ? *requested : "";
  } else {
    if (requested != nullptr) {
      for (absl::string_view name : absl::StrSplit(*requested, ',', absl::SkipWhitespace())) {
        name = absl::StripAsciiWhitespace(name);
        const bool safelisted =
            std::any_of(std::begin(kSafelistedHeaders), std::end(kSafelistedHeaders),
                        [&](absl::string_view s) { return absl::EqualsIgnoreCase(s, name); });
        if (!safelisted && !Contains(o.allowed_headers, name, true)) {
          return Rejected(absl::StrCat("header '", name, "'"));
        }
      }
    }
    std::vector<std::string> names;
    for (absl::string_view h : kSafelistedHeaders) names.emplace_back(h);
    names.insert(names.end(), o.allowed_headers.begin(), o.allowed_headers.end());
    allow_headers = absl::StrJoin(names, ", ");
  }
  HttpResponse response;
  response.status = 200;
  response.content_type = "text/plain; charset=utf-8";
  response.headers = CorsResponseHeaders(o, *origin);
  response.headers.push_back(
      {"Access-Control-Allow-Methods", AnyAllowed(o.allowed_methods)
                                           ? std::string(kAnyMethods)
                                           : absl::StrJoin(o.allowed_methods, ", ")});
  if (!allow_headers.empty())
    response.headers.push_back({"Access-Control-Allow-Headers", allow_headers});
  response.headers.push_back({"Access-Control-Max-Age", "600"});
  response.body = "OK";
  return response;
}

}  // namespace strata::http
