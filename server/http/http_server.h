// An HTTP/1.1 server on Boost.Beast over Asio (the only place Beast and Asio are included; this
// header keeps them behind a pimpl).
//
// * Keep-alive and pipelining: requests on one connection are answered in order.
// * Limits: `max_body_bytes` → 413, `max_header_bytes` → 431, malformed HTTP → 400 (all via
//   HttpHandler::ProtocolError, then the connection is closed gracefully: the send side is shut
//   and what the client still sends is read and dropped for a bounded time and byte count, as
//   nginx's lingering close, so that a client still sending an oversized body without
//   `Expect: 100-continue` reads the 413 instead of a connection reset). A request body with a
//   Content-Encoding other than identity → 415 naming the supported one (the connection stays).
// * Connections: at most `max_connections` open; past it a new connection is answered 503
//   (Retry-After, Connection: close) and closed, and counted (stats().num_refused_total).
//   accept() failures (out of descriptors: EMFILE, ENFILE) back off exponentially from 1 ms to
//   1 s instead of spinning, and are logged at most once a second with a count of the rest.
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
  // Open connections at most; 0: DefaultMaxConnections() when the server starts.
  int64_t max_connections = 0;
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
  int64_t num_connections = 0;  // open now and served (not those being refused)
  int64_t num_exchanges = 0;    // requests read whose response is not fully written yet
  int64_t num_requests_total = 0;
  int64_t num_cancelled_total = 0;  // pending responses cancelled by a disconnect or write error
  int64_t max_connections = 0;      // the limit in force (options' or the default)
  int64_t num_refused_total = 0;    // connections turned away over max_connections
  int64_t num_accept_errors_total = 0;  // failed accept() calls (e.g. out of descriptors)
};

// The connection limit for a process whose soft descriptor limit (RLIMIT_NOFILE) is
// `descriptor_limit`: the limit less a reserve of a quarter of it, at least 64 and at most 1024
// descriptors, for what else the process opens (checkpoint files, gRPC connections, the
// listening sockets, logs); at least 1. E.g. 512 → 384, 1024 → 768, 65536 → 64512.
int64_t MaxConnectionsForDescriptorLimit(int64_t descriptor_limit);
// MaxConnectionsForDescriptorLimit of this process's soft RLIMIT_NOFILE (unlimited: 1 << 20).
int64_t DefaultMaxConnections();

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
