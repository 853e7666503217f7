// The plain-struct seam between the HTTP transport (http_server.cc, Boost.Beast) and whoever
// answers requests (server/frontend). Nothing here knows about sockets or Asio, so handlers are
// unit-tested without a network.
//
//   socket ──► HttpServer (parse, limits, timeouts) ──HttpRequest──► HttpHandler::Handle
//                                     ◄── HandlerResult: a whole response, or a PendingResponse
//   PendingResponse: produced over time by other threads (the engine loop); it calls `wake`
//   and the server polls it on its I/O thread, writing SSE bytes as they come.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::http {

struct Header {
  std::string name;
  std::string value;
};

struct HttpRequest {
  std::string method;           // "GET", "POST", ... as sent
  std::string target;           // path and query as sent
  std::string path;             // target without "?query"
  std::vector<Header> headers;  // names lower-cased
  std::string body;

  // The first header named `lower_name` (lower case), or nullptr.
  const std::string* FindHeader(std::string_view lower_name) const {
    for (const Header& h : headers) {
      if (h.name == lower_name) return &h.value;
    }
    return nullptr;
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<Header> headers;  // extra headers (Retry-After, Allow, ...)
  std::string body;
  bool close_connection = false;  // send "Connection: close" and close after the response
};

// A response produced over time on other threads: an SSE stream or a non-streamed generation.
// The server calls Start once, then Poll on its I/O thread whenever `wake` was called (and
// after Start), until Poll returns true or the exchange ends early with Cancel.
class PendingResponse {
 public:
  virtual ~PendingResponse() = default;

  // True: the body is sent as it is produced (chunked transfer encoding) after the head the
  // handler returned in HandlerResult::response. False: Poll produces the whole response once.
  virtual bool streaming() const = 0;
  // `wake` is thread-safe, may be called any number of times (also after the exchange ended)
  // and makes the server call Poll soon.
  virtual void Start(std::function<void()> wake) = 0;
  // Non-blocking. Streaming: appends the body bytes ready now to out->body. Not streaming: on
  // completion fills *out with the whole response. Returns true when nothing more will come.
  virtual bool Poll(HttpResponse* out) = 0;
  // Bytes written when a stream has been silent for the server's ping interval (SSE comment
  // pings so that proxies keep the connection during long prefills); empty: none.
  virtual std::string_view keepalive_bytes() const { return {}; }
  // The client went away, a write failed or the server is closing: stop producing (e.g. abort
  // the engine request). Poll is not called afterwards.
  virtual void Cancel() = 0;
};

struct HandlerResult {
  // The whole response when `pending` is null; with a streaming `pending`, the head (status,
  // content type, headers) sent before the first Poll; ignored with a non-streaming `pending`.
  HttpResponse response;
  std::unique_ptr<PendingResponse> pending;
};

// One finished exchange, reported to HttpServerOptions::on_exchange (for metrics).
struct ExchangeRecord {
  std::string_view method;  // as sent (any token: metrics map it to a fixed set)
  std::string_view path;    // without the query
  // The status sent; 499 (nginx's "client closed request") when the client left before any
  // response was sent.
  int status = 0;
  double seconds = 0;          // request read → response fully written (or the client gone)
  int64_t request_bytes = 0;   // body
  int64_t response_bytes = 0;  // body (a stream's data as written, without chunk framing)
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // Called on an I/O thread for every well-formed request; must not block on the engine.
  virtual HandlerResult Handle(HttpRequest request) = 0;
  // The response for a failure the server found before a handler saw a request: malformed
  // HTTP (400), body over the limit (413), headers over the limit (431), a request that did
  // not arrive in time (408), a body in a Content-Encoding other than identity (415), a
  // connection over the server's limit (503). `code` is a short machine-readable word
  // ("request_too_large"). The server adds headers (Retry-After, Accept-Encoding) and decides
  // whether the connection stays.
  virtual HttpResponse ProtocolError(int status, std::string_view code,
                                     std::string_view message) = 0;
};

}  // namespace strata::http
