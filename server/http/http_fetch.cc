#include "server/http/http_fetch.h"

#include <openssl/ssl.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

constexpr uint32_t kMaxHeaderBytes = 64 << 10;

// What went wrong, for the message: the step and the library's words.
struct Failure {
  std::string step;
  std::string reason;
};

// GET over `stream` (connected, handshaken); the response's status and body into `out`.
template <typename Stream>
asio::awaitable<std::optional<Failure>> Exchange(
    Stream& stream, const HttpUrl& url, int64_t max_bytes,
    beast::http::response<beast::http::string_body>* out) {
  boost::system::error_code ec;
  beast::http::request<beast::http::empty_body> request{beast::http::verb::get, url.target, 11};
  request.set(beast::http::field::host, url.host);
  request.set(beast::http::field::user_agent, "strata");
  co_await beast::http::async_write(stream, request, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return Failure{"sending the request", ec.message()};
  beast::flat_buffer buffer;
  beast::http::response_parser<beast::http::string_body> parser;
  parser.header_limit(kMaxHeaderBytes);
  parser.body_limit(static_cast<uint64_t>(max_bytes));
  co_await beast::http::async_read(stream, buffer, parser,
                                   asio::redirect_error(asio::use_awaitable, ec));
  if (ec == beast::http::error::body_limit) {
    co_return Failure{"reading the response",
                      absl::StrCat("the body is over the limit of ", max_bytes, " bytes")};
  }
  if (ec) co_return Failure{"reading the response", ec.message()};
  *out = parser.release();
  co_return std::nullopt;
}

asio::awaitable<std::optional<Failure>> Get(asio::io_context& io, asio::ssl::context& tls,
                                            const HttpUrl& url, const FetchLimits& limits,
                                            beast::http::response<beast::http::string_body>* out) {
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  const auto endpoints = co_await resolver.async_resolve(
      url.host, url.port, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return Failure{"resolving the host", ec.message()};
  beast::ssl_stream<beast::tcp_stream> stream(io, tls);
  beast::tcp_stream& tcp_stream = beast::get_lowest_layer(stream);
  tcp_stream.expires_after(limits.timeout);  // one deadline for everything below
  co_await tcp_stream.async_connect(endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return Failure{"connecting", ec.message()};
  if (!url.https) co_return co_await Exchange(tcp_stream, url, limits.max_bytes, out);
  if (!SSL_set_tlsext_host_name(stream.native_handle(), url.host.c_str())) {
    co_return Failure{"starting TLS", "cannot set the server name"};
  }
  stream.set_verify_callback(asio::ssl::host_name_verification(url.host));
  co_await stream.async_handshake(asio::ssl::stream_base::client,
                                  asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return Failure{"the TLS handshake", ec.message()};
  co_return co_await Exchange(stream, url, limits.max_bytes, out);
}

}  // namespace

absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url_text) {
  const absl::string_view url(url_text.data(), url_text.size());
  HttpUrl out;
  absl::string_view rest;
  if (absl::StartsWithIgnoreCase(url, "http://")) {
    rest = url.substr(7);
  } else if (absl::StartsWithIgnoreCase(url, "https://")) {
    out.https = true;
    rest = url.substr(8);
  } else {
    return absl::InvalidArgumentError("not an http:// or https:// URL");
  }
  const size_t slash = rest.find_first_of("/?#");
  absl::string_view authority = rest.substr(0, slash);
  absl::string_view target = slash == absl::string_view::npos ? "/" : rest.substr(slash);
  target = target.substr(0, target.find('#'));
  if (authority.find('@') != absl::string_view::npos) {
    return absl::InvalidArgumentError("URLs with user info (user@host) are not fetched");
  }
  const size_t colon = authority.rfind(':');
  out.port = out.https ? "443" : "80";
  if (colon != absl::string_view::npos && authority.find(']') == absl::string_view::npos) {
    int port = 0;
    if (!absl::SimpleAtoi(authority.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad port '", authority.substr(colon + 1), "' (1 to 65535)"));
    }
    out.port = std::to_string(port);
    authority = authority.substr(0, colon);
  }
  if (authority.empty()) return absl::InvalidArgumentError("the URL has no host");
  out.host = absl::AsciiStrToLower(authority);
  out.target = target.empty() || target[0] != '/' ? absl::StrCat("/", target) : std::string(target);
  return out;
}

absl::StatusOr<std::string> FetchUrl(const HttpUrl& url, const FetchLimits& limits) {
  asio::io_context io;
  asio::ssl::context tls(asio::ssl::context::tls_client);
  tls.set_default_verify_paths();
  tls.set_verify_mode(asio::ssl::verify_peer);
  beast::http::response<beast::http::string_body> response;
  std::optional<Failure> failure = Failure{"fetching", "did not finish"};
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> { failure = co_await Get(io, tls, url, limits, &response); },
      asio::detached);
  io.run();
  const std::string where = absl::StrCat("fetching ", url.https ? "https://" : "http://", url.host);
  if (failure) {
    const bool timed_out = failure->reason == beast::error_code(beast::error::timeout).message();
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", failure->step, " failed: ",
        timed_out ? absl::StrCat("timed out (the limit is ", limits.timeout.count(), " ms)")
                  : failure->reason));
  }
  if (response.result() != beast::http::status::ok) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": HTTP ", response.result_int(),
                                                   " (only a 200 response is used; redirects are "
                                                   "not followed)"));
  }
  return std::move(response.body());
}

}  // namespace strata::http
