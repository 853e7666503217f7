// An HTTP/1.1 server on Boost.Beast over Asio (the only place Beast and Asio are included; this
// header keeps them behind a pimpl).
//
// * Keep-alive and pipelining: requests on one connection are answered in order.
// * Limits: `max_body_bytes` → 413, `max_header_bytes` → 431, malformed HTTP → 400 (all via
//   HttpHandler::ProtocolError, then the connection is closed).
// * Timeouts: a request must arrive whole within `request_timeout` of its first byte (slow
//   headers or bodies, "slowloris" → 408 and close); an idle keep-alive connection is closed
//   after `idle_timeout`; a write that does not finish within `write_timeout` closes it.
// * Pending responses: while a PendingResponse runs, the server watches the socket; a client
//   that closes its end (or a failed write) cancels it at once, even before any byte was sent.
//   Streams silent for `ping_interval` get the response's keep-alive bytes.
// Threads: `num_threads` I/O threads; a connection's work runs on its own strand.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/http/cors.h"
#include "server/http/http_types.h"

namespace strata::http {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::port())
  int num_threads = 2;
  int64_t max_body_bytes = 16 << 20;
  int64_t max_header_bytes = 64 << 10;
  absl::Duration request_timeout = absl::Seconds(30);
  absl::Duration idle_timeout = absl::Seconds(75);
  absl::Duration write_timeout = absl::Seconds(60);
  absl::Duration ping_interval = absl::Seconds(10);
  CorsOptions cors;  // browser clients (cors.h): any origin by default, as vLLM
  // Called on an I/O thread after each exchange the handler saw (also CORS preflights; not
  // protocol errors answered while reading a request). May be empty.
  std::function<void(const ExchangeRecord&)> on_exchange;
};

struct HttpServerStats {
  int64_t num_connections = 0;  // open now
  int64_t num_exchanges = 0;    // requests read whose response is not fully written yet
  int64_t num_requests_total = 0;
  int64_t num_cancelled_total = 0;  // pending responses cancelled by a disconnect or write error
};

class HttpServer {
 public:
  // Binds and listens (errors: bad address, port in use) and starts the I/O threads.
  // `handler` must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           HttpHandler* handler);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port (the real one when options.port was 0).
  int port() const;
  HttpServerStats stats() const;
  // Closes the listening socket; open connections keep being served.
  void StopAccepting();
  // Cancels every pending response, closes every connection and joins the I/O threads.
  void Stop();

  struct Impl;  // defined in http_server.cc (public only so its helpers can name it)

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::http
