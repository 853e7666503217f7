// The Boost.Beast/Asio translation unit (keep Beast and Asio out of every other file: this one
// takes most of the build time of the server).
//
// One coroutine per connection runs on the connection's strand:
//   loop: wait for a first byte (idle_timeout) → read header + body (request_timeout from the
//   first byte) → handler → write the response, or drive a PendingResponse: Poll it whenever it
//   wakes us, write SSE chunks, ping when silent, and meanwhile a second coroutine reads the
//   socket so that a client that closes its end cancels the pending response at once.
// Deadlines are our own timers (not beast::tcp_stream's, which close the socket) so a slow
// request can still be answered 408.
// A connection past max_connections gets a session that only refuses it: 503, then the lingering
// close that every protocol error answered while reading ends with.
#include "server/http/http_server.h"

#include <utility>  // before Asio: Boost 1.74's asio/awaitable.hpp uses std::exchange

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/log.h"

namespace strata::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;
using net::awaitable;
using net::use_awaitable;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

// Longest X-Request-Id echoed (the front end refuses longer ones as request ids).
constexpr size_t kMaxEchoedRequestIdBytes = 256;

// Lingering close (nginx's lingering_time / lingering_timeout): after answering a request that
// was not read whole, what the client still sends is dropped for at most this long in all, this
// long between reads, and this many bytes (then the socket is closed, a reset if more comes).
constexpr auto kLingerTime = std::chrono::seconds(30);
constexpr auto kLingerIdle = std::chrono::seconds(5);
constexpr int64_t kLingerBytes = int64_t{1} << 30;
// A connection refused over max_connections lingers this long at most, and at most this many
// refused connections linger at a time (the rest are closed right after the 503).
constexpr auto kRefusedLingerTime = std::chrono::seconds(1);
constexpr int64_t kMaxLingeringRefused = 64;
// accept() failures back off exponentially between these bounds.
constexpr auto kMinAcceptBackoff = std::chrono::milliseconds(1);
constexpr auto kMaxAcceptBackoff = std::chrono::seconds(1);
// A recurring warning (accept failures, refused connections) is logged at most this often.
constexpr auto kLogInterval = std::chrono::seconds(1);
// Longest Content-Encoding value quoted back in a 415.
constexpr size_t kMaxQuotedCodingBytes = 64;

auto Redirect(error_code& ec) { return net::redirect_error(use_awaitable, ec); }

bool IsDisconnect(const error_code& ec) {
  return ec == net::error::eof || ec == bhttp::error::end_of_stream ||
         ec == bhttp::error::partial_message || ec == net::error::connection_reset ||
         ec == net::error::broken_pipe || ec == net::error::operation_aborted ||
         ec == net::error::bad_descriptor || ec == net::error::not_connected;
}

// The first coding in the request's Content-Encoding headers other than identity (truncated
// for quoting); empty when the body is plain.
std::string UnsupportedContentEncoding(const HttpRequest& request) {
  for (const Header& h : request.headers) {
    if (h.name != "content-encoding") continue;
    for (absl::string_view coding : absl::StrSplit(h.value, ',')) {
      coding = absl::StripAsciiWhitespace(coding);
      if (!coding.empty() && !absl::EqualsIgnoreCase(coding, "identity")) {
        return std::string(coding.substr(0, kMaxQuotedCodingBytes));
      }
    }
  }
  return "";
}

// A warning that may recur thousands of times a second (accept failures under descriptor
// exhaustion) logged at most once per kLogInterval; the occurrences in between are counted and
// reported with the next line. Not thread-safe: used on the acceptor's strand only.
class LogThrottle {
 public:
  // True when a line is due now; *suppressed: the occurrences not logged since the last line.
  bool Due(int64_t* suppressed) {
    const auto now = Clock::now();
    if (now - last_logged_ < kLogInterval) {
      ++suppressed_;
      return false;
    }
    *suppressed = suppressed_;
    suppressed_ = 0;
    last_logged_ = now;
    return true;
  }

 private:
  Clock::time_point last_logged_{};
  int64_t suppressed_ = 0;
};

// This process's soft RLIMIT_NOFILE (unlimited or unknown: 1 << 20).
int64_t DescriptorLimit() {
  constexpr int64_t kUnlimited = int64_t{1} << 20;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kUnlimited;
  return std::min<int64_t>(static_cast<int64_t>(limit.rlim_cur), kUnlimited);
}

HttpRequest ToRequest(bhttp::request<bhttp::string_body>&& msg) {
  HttpRequest request;
  request.method = std::string(msg.method_string());
  request.target = std::string(msg.target());
  request.path = request.target.substr(0, request.target.find('?'));
  for (const auto& field : msg) {
    const auto name = field.name_string();
    Header header;
    header.name = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
    header.value = std::string(field.value());
    request.headers.push_back(std::move(header));
  }
  request.body = std::move(msg.body());
  return request;
}

}  // namespace

class Session;

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler* handler = nullptr;
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> work{ioc.get_executor()};
  tcp::acceptor acceptor{net::make_strand(ioc)};
  std::vector<std::thread> threads;
  int port = 0;

  std::mutex mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  std::atomic<int64_t> num_exchanges{0};
  std::atomic<int64_t> num_requests_total{0};
  std::atomic<int64_t> num_cancelled_total{0};
  std::atomic<int64_t> num_refused_total{0};
  std::atomic<int64_t> num_accept_errors_total{0};
  // Sessions (in `sessions`) answering 503 to a connection over max_connections.
  std::atomic<int64_t> num_refusing{0};
  std::atomic<bool> stopped{false};
  // Accept loop state, on the acceptor's strand.
  net::steady_timer accept_backoff{acceptor.get_executor()};
  LogThrottle accept_error_log;
  LogThrottle refused_log;

  awaitable<void> Accept();
  // Waits out an accept() failure (backing off) and logs it, throttled.
  awaitable<void> BackOff(const error_code& ec, std::chrono::milliseconds* backoff);
  // Starts the session of an accepted connection, or one that refuses it past max_connections.
  void Admit(tcp::socket socket);
  // The 503 of a connection over max_connections.
  HttpResponse Refusal();
  // Refuses without a session (kMaxLingeringRefused are lingering): the 503 is written without
  // waiting (a new socket's send buffer takes it whole) and the socket closed.
  void RefuseAtOnce(tcp::socket& socket);
  void Register(const std::shared_ptr<Session>& session);
  void Unregister(Session* session);
  size_t NumSessions() {
    std::lock_guard<std::mutex> lock(mu);
    return sessions.size();
  }
  // Open connections being served (not the ones being refused).
  int64_t NumServed() { return static_cast<int64_t>(NumSessions()) - num_refusing.load(); }
};

// Lets other threads wake a session for as long as it lives (cleared by the session before
// it goes away, so a late wake from the engine thread never touches a dead strand).
struct WakeTarget {
  std::mutex mu;
  std::weak_ptr<Session> session;
  bool alive = true;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `refuse`: the connection is over max_connections; Run answers 503 and closes it.
  Session(HttpServer::Impl* server, tcp::socket socket, bool refuse)
      : server_(server),
        socket_(std::move(socket)),
        wake_timer_(socket_.get_executor()),
        read_timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()),
        refuse_(refuse),
        wake_target_(std::make_shared<WakeTarget>()) {
    if (refuse_) server_->num_refusing++;
  }

  ~Session() {
    ReleaseWakeTarget();
    server_->Unregister(this);
    if (refuse_) server_->num_refusing--;
  }

  net::any_io_executor executor() { return socket_.get_executor(); }

  static awaitable<void> Run(std::shared_ptr<Session> self);

  // On the strand: ends the connection now (server shutdown).
  void CloseNow() {
    closed_ = true;
    CancelPending();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    OnWake();
  }

 private:
  void OnWake() {
    woken_ = true;
    wake_timer_.cancel();
  }
  std::function<void()> MakeWake();
  void ReleaseWakeTarget() {
    std::lock_guard<std::mutex> lock(wake_target_->mu);
    wake_target_->alive = false;
  }
  // Cancels the pending response once (it stays owned until the exchange ends). Counted first,
  // so that whoever sees the abort's effects (the engine's counters) also sees the count.
  void CancelPending() {
    if (!pending_ || pending_cancelled_) return;
    pending_cancelled_ = true;
    server_->num_cancelled_total++;
    pending_->Cancel();
  }

  // Deadlines: a timer whose expiry cancels (read) or closes (write) the socket. The
  // generation makes a timer that fired after its operation finished a no-op.
  void Arm(net::steady_timer& timer, uint64_t& generation, absl::Duration timeout, bool read);
  void Disarm(net::steady_timer& timer, uint64_t& generation) {
    ++generation;
    timer.cancel();
  }

  awaitable<bool> ReadRequest(bhttp::request_parser<bhttp::string_body>& parser);
  // Answers a request that could not be read (408, 413, 431, 400); `content_length` as sent.
  awaitable<void> ReportReadError(const error_code& ec, std::optional<uint64_t> content_length);
  // Answers 503 to a connection over max_connections.
  awaitable<void> Refuse();
  // Shuts the send side (the client sees the response end) and drops what the client still
  // sends until it closes, is silent for kLingerIdle, or `linger` or kLingerBytes pass; so a
  // client still sending a request we answered early (an oversized body without
  // `Expect: 100-continue`) gets to read the answer instead of a connection reset.
  awaitable<void> LingerClose(Clock::duration linger);
  // One request and its response, reported to options.on_exchange; true: keep the connection.
  awaitable<bool> Exchange(bhttp::request<bhttp::string_body>&& msg);
  awaitable<bool> Respond(HttpRequest request, bool keep_alive);
  awaitable<bool> WriteResponse(const HttpResponse& response, bool keep_alive);
  awaitable<bool> WriteBytes(std::string_view bytes, bool chunk);
  awaitable<bool> Stream(const HttpResponse& head, bool keep_alive);
  awaitable<bool> AwaitWhole(bool keep_alive);
  // Waits until woken, disconnected, closed or `deadline`; true when the deadline passed.
  awaitable<bool> WaitForWake(Clock::time_point deadline);
  static awaitable<void> Watch(std::shared_ptr<Session> self);
  awaitable<void> StopWatching();

  HttpServer::Impl* server_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  net::steady_timer wake_timer_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  uint64_t read_generation_ = 0;
  uint64_t write_generation_ = 0;
  bool read_timed_out_ = false;
  bool woken_ = false;
  bool disconnected_ = false;
  bool closed_ = false;
  bool watching_ = false;
  bool stop_watching_ = false;
  const bool refuse_;
  // A response went out before the request was read whole: close by LingerClose.
  bool linger_ = false;
  std::unique_ptr<PendingResponse> pending_;
  bool pending_cancelled_ = false;
  // Added to every response of the exchange in progress: CORS (cors.h) and the echoed
  // X-Request-Id.
  std::vector<Header> exchange_headers_;
  // Of the exchange in progress, for ExchangeRecord: the status sent (499 until one is) and the
  // body bytes written.
  int sent_status_ = 499;
  int64_t sent_body_bytes_ = 0;
  std::shared_ptr<WakeTarget> wake_target_;
};

std::function<void()> Session::MakeWake() {
  {
    std::lock_guard<std::mutex> lock(wake_target_->mu);
    wake_target_->session = weak_from_this();
  }
  std::shared_ptr<WakeTarget> target = wake_target_;
  net::any_io_executor ex = socket_.get_executor();
  return [target, ex] {
    std::lock_guard<std::mutex> lock(target->mu);
    if (!target->alive) return;
    std::weak_ptr<Session> weak = target->session;
    net::post(ex, [weak] {
      if (auto self = weak.lock()) self->OnWake();
    });
  };
}

void Session::Arm(net::steady_timer& timer, uint64_t& generation, absl::Duration timeout,
                  bool read) {
  const uint64_t armed = ++generation;
  timer.expires_after(absl::ToChronoNanoseconds(timeout));
  timer.async_wait([self = shared_from_this(), armed, read](const error_code& ec) {
    if (ec) return;
    error_code ignored;
    if (read) {
      if (armed != self->read_generation_) return;
      self->read_timed_out_ = true;
      self->socket_.cancel(ignored);
    } else {
      if (armed != self->write_generation_) return;
      self->socket_.close(ignored);
    }
  });
}

awaitable<bool> Session::WaitForWake(Clock::time_point deadline) {
  while (!woken_ && !disconnected_ && !closed_) {
    if (Clock::now() >= deadline) co_return true;
    wake_timer_.expires_at(deadline);
    error_code ec;
    co_await wake_timer_.async_wait(Redirect(ec));
  }
  woken_ = false;
  co_return false;
}

awaitable<void> Session::Watch(std::shared_ptr<Session> self) {
  // A read, not a readiness wait: reads complete at once when the peer already closed (an
  // epoll edge that came before the wait would be lost), and bytes of a pipelined next request
  // simply land in the buffer the next parse starts from.
  constexpr size_t kMaxBuffered = 1 << 20;
  while (!self->stop_watching_ && !self->closed_ && self->buffer_.size() < kMaxBuffered) {
    error_code ec;
    const size_t n =
        co_await self->socket_.async_read_some(self->buffer_.prepare(16 << 10), Redirect(ec));
    self->buffer_.commit(n);
    if (ec) {
      if (ec != net::error::operation_aborted) self->disconnected_ = true;
      break;
    }
  }
  self->watching_ = false;
  self->OnWake();
}

awaitable<void> Session::StopWatching() {
  stop_watching_ = true;
  if (watching_) {
    error_code ignored;
    socket_.cancel(ignored);
  }
  // Not WaitForWake: it returns at once on a closed or disconnected session, and this loop
  // must yield to let the watcher finish (its completion cancels the timer).
  while (watching_) {
    wake_timer_.expires_after(std::chrono::seconds(1));
    error_code ec;
    co_await wake_timer_.async_wait(Redirect(ec));
  }
  stop_watching_ = false;
}

awaitable<bool> Session::WriteBytes(std::string_view bytes, bool chunk) {
  error_code ec;
  Arm(write_timer_, write_generation_, server_->options.write_timeout, /*read=*/false);
  if (chunk) {
    sent_body_bytes_ += static_cast<int64_t>(bytes.size());
    co_await net::async_write(socket_, bhttp::make_chunk(net::buffer(bytes.data(), bytes.size())),
                              Redirect(ec));
  } else {
    co_await net::async_write(socket_, net::buffer(bytes.data(), bytes.size()), Redirect(ec));
  }
  Disarm(write_timer_, write_generation_);
  co_return !ec;
}

awaitable<bool> Session::WriteResponse(const HttpResponse& response, bool keep_alive) {
  bhttp::response<bhttp::string_body> res;
  res.version(11);
  res.result(static_cast<unsigned>(response.status));
  res.set(bhttp::field::server, "strata");
  res.set(bhttp::field::content_type, response.content_type);
  for (const Header& h : response.headers) res.set(h.name, h.value);
  for (const Header& h : exchange_headers_) res.set(h.name, h.value);
  res.keep_alive(keep_alive);
  res.body() = response.body;
  res.prepare_payload();
  sent_status_ = response.status;
  sent_body_bytes_ = static_cast<int64_t>(response.body.size());
  error_code ec;
  Arm(write_timer_, write_generation_, server_->options.write_timeout, /*read=*/false);
  co_await bhttp::async_write(socket_, res, Redirect(ec));
  Disarm(write_timer_, write_generation_);
  co_return !ec;
}

awaitable<bool> Session::ReadRequest(bhttp::request_parser<bhttp::string_body>& parser) {
  error_code ec;
  read_timed_out_ = false;
  if (buffer_.size() == 0) {  // idle keep-alive connection: wait for the first byte
    Arm(read_timer_, read_generation_, server_->options.idle_timeout, /*read=*/true);
    const size_t n = co_await socket_.async_read_some(buffer_.prepare(16 << 10), Redirect(ec));
    Disarm(read_timer_, read_generation_);
    if (ec) co_return false;  // idle timeout or the client closed: end quietly
    buffer_.commit(n);
  }
  parser.header_limit(static_cast<uint32_t>(server_->options.max_header_bytes));
  parser.body_limit(static_cast<uint64_t>(server_->options.max_body_bytes));
  Arm(read_timer_, read_generation_, server_->options.request_timeout, /*read=*/true);
  co_await bhttp::async_read_header(socket_, buffer_, parser, Redirect(ec));
  if (!ec && !parser.is_done()) {
    const auto expect = parser.get().find(bhttp::field::expect);
    if (expect != parser.get().end() &&
        absl::EqualsIgnoreCase(absl::string_view(expect->value().data(), expect->value().size()),
                               "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      Disarm(read_timer_, read_generation_);
      if (!co_await WriteBytes(kContinue, /*chunk=*/false)) co_return false;
      Arm(read_timer_, read_generation_, server_->options.request_timeout, /*read=*/true);
    }
    co_await bhttp::async_read(socket_, buffer_, parser, Redirect(ec));
  }
  Disarm(read_timer_, read_generation_);
  if (ec) {
    const auto length = parser.content_length();  // boost::optional
    co_await ReportReadError(ec, length ? std::optional<uint64_t>(*length) : std::nullopt);
    co_return false;
  }
  co_return true;
}

awaitable<void> Session::ReportReadError(const error_code& ec,
                                         std::optional<uint64_t> content_length) {
  HttpHandler* h = server_->handler;
  HttpResponse response;
  if (read_timed_out_) {
    response = h->ProtocolError(
        408, "request_timeout",
        absl::StrCat("the request did not arrive within ",
                     absl::FormatDuration(server_->options.request_timeout), " of its first byte"));
  } else if (ec == bhttp::error::body_limit) {
    const std::string size =
        content_length ? absl::StrCat(" of ", *content_length, " bytes") : std::string();
    response = h->ProtocolError(
        413, "request_too_large",
        absl::StrCat("request body", size, " exceeds the limit of ",
                     server_->options.max_body_bytes, " bytes (the server's --max-body-bytes)"));
  } else if (ec == bhttp::error::header_limit) {
    response = h->ProtocolError(431, "request_header_fields_too_large",
                                absl::StrCat("request headers exceed the limit of ",
                                             server_->options.max_header_bytes, " bytes"));
  } else if (IsDisconnect(ec) ||
             ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category()) {
    co_return;  // the client went away mid-request
  } else {
    response = h->ProtocolError(400, "malformed_request",
                                absl::StrCat("malformed HTTP request: ", ec.message()));
  }
  linger_ = true;
  co_await WriteResponse(response, /*keep_alive=*/false);
}

awaitable<void> Session::Refuse() {
  linger_ = true;
  co_await WriteResponse(server_->Refusal(), /*keep_alive=*/false);
}

awaitable<void> Session::LingerClose(Clock::duration linger) {
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) co_return;
  const auto deadline = Clock::now() + linger;
  std::array<char, 16 << 10> scratch;
  int64_t dropped = static_cast<int64_t>(buffer_.size());
  buffer_.consume(buffer_.size());
  while (!closed_ && dropped < kLingerBytes) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) break;
    Arm(read_timer_, read_generation_,
        absl::FromChrono(std::min<Clock::duration>(left, kLingerIdle)), /*read=*/true);
    const size_t n = co_await socket_.async_read_some(net::buffer(scratch), Redirect(ec));
    Disarm(read_timer_, read_generation_);
    dropped += static_cast<int64_t>(n);
    if (ec) break;  // the client closed (EOF), went silent, or the server stops
  }
}

awaitable<bool> Session::Stream(const HttpResponse& head, bool keep_alive) {
  bhttp::response<bhttp::empty_body> res;
  res.version(11);
  res.result(static_cast<unsigned>(head.status));
  res.set(bhttp::field::server, "strata");
  res.set(bhttp::field::content_type, head.content_type);
  for (const Header& h : head.headers) res.set(h.name, h.value);
  for (const Header& h : exchange_headers_) res.set(h.name, h.value);
  res.keep_alive(keep_alive);
  res.chunked(true);
  bhttp::response_serializer<bhttp::empty_body> serializer(res);
  sent_status_ = head.status;
  error_code ec;
  Arm(write_timer_, write_generation_, server_->options.write_timeout, /*read=*/false);
  co_await bhttp::async_write_header(socket_, serializer, Redirect(ec));
  Disarm(write_timer_, write_generation_);
  const auto ping_interval = absl::ToChronoNanoseconds(server_->options.ping_interval);
  auto last_write = Clock::now();
  bool ok = !ec;
  while (ok) {
    if (disconnected_ || closed_) {
      ok = false;
      break;
    }
    HttpResponse out;
    const bool done = pending_->Poll(&out);
    if (!out.body.empty()) {
      ok = co_await WriteBytes(out.body, /*chunk=*/true);
      last_write = Clock::now();
    }
    if (done || !ok) break;
    const bool silent = co_await WaitForWake(last_write + ping_interval);
    if (disconnected_ || closed_) ok = false;
    if (ok && silent && !pending_->keepalive_bytes().empty()) {
      ok = co_await WriteBytes(pending_->keepalive_bytes(), /*chunk=*/true);
      last_write = Clock::now();
    }
  }
  if (!ok) {
    CancelPending();
    co_return false;
  }
  co_await StopWatching();
  Arm(write_timer_, write_generation_, server_->options.write_timeout, /*read=*/false);
  co_await net::async_write(socket_, bhttp::make_chunk_last(), Redirect(ec));
  Disarm(write_timer_, write_generation_);
  co_return !ec;
}

awaitable<bool> Session::AwaitWhole(bool keep_alive) {
  HttpResponse out;
  while (true) {
    if (disconnected_ || closed_) {
      CancelPending();
      co_return false;
    }
    if (pending_->Poll(&out)) break;
    co_await WaitForWake(Clock::now() + std::chrono::hours(24));
  }
  co_await StopWatching();
  if (out.close_connection) keep_alive = false;
  const bool written = co_await WriteResponse(out, keep_alive);
  co_return written&& keep_alive;
}

awaitable<bool> Session::Exchange(bhttp::request<bhttp::string_body>&& msg) {
  const bool keep_alive = msg.keep_alive();
  HttpRequest request = ToRequest(std::move(msg));
  if (!server_->options.on_exchange) co_return co_await Respond(std::move(request), keep_alive);
  const auto started = Clock::now();
  const std::string method = request.method, path = request.path;
  const auto request_bytes = static_cast<int64_t>(request.body.size());
  sent_status_ = 499;
  sent_body_bytes_ = 0;
  const bool keep = co_await Respond(std::move(request), keep_alive);
  server_->options.on_exchange(
      ExchangeRecord{.method = method,
                     .path = path,
                     .status = sent_status_,
                     .seconds = std::chrono::duration<double>(Clock::now() - started).count(),
                     .request_bytes = request_bytes,
                     .response_bytes = sent_body_bytes_});
  co_return keep;
}

awaitable<bool> Session::Respond(HttpRequest request, bool keep_alive) {
  // CORS: a preflight is answered here; other responses carry the allow-origin headers.
  const CorsOptions& cors = server_->options.cors;
  if (std::optional<HttpResponse> preflight = CorsPreflight(cors, request)) {
    exchange_headers_.clear();
    co_return co_await WriteResponse(*preflight, keep_alive) && keep_alive;
  }
  const std::string* origin = request.FindHeader("origin");
  exchange_headers_ =
      origin != nullptr ? CorsResponseHeaders(cors, *origin) : std::vector<Header>();
  // X-Request-Id comes back as sent (a trace id through proxies), as vLLM's
  // --enable-request-id-headers; an oversized one is the handler's 400 and not echoed.
  if (const std::string* id = request.FindHeader("x-request-id");
      id != nullptr && !id->empty() && id->size() <= kMaxEchoedRequestIdBytes) {
    exchange_headers_.push_back({"X-Request-Id", *id});
  }
  // Compressed bodies are refused rather than read as plain text (RFC 9110 §15.5.16: 415 with
  // the codings accepted; a request without a body has nothing to decode). The body was read
  // whole, so the connection stays.
  if (const std::string coding = UnsupportedContentEncoding(request);
      !coding.empty() && !request.body.empty()) {
    HttpResponse response = server_->handler->ProtocolError(
        415, "unsupported_content_encoding",
        absl::StrCat("Content-Encoding '", coding,
                     "' is not supported: send the request body uncompressed (supported "
                     "Content-Encoding: identity)"));
    response.headers.push_back({"Accept-Encoding", "identity"});
    response.close_connection = false;
    co_return co_await WriteResponse(response, keep_alive) && keep_alive;
  }
  HandlerResult result;
  try {
    result = server_->handler->Handle(std::move(request));
  } catch (const std::exception& e) {  // our code throws nothing; a library might
    LOG_ERROR("http", "handler threw: {}", e.what());
    result.pending.reset();
    result.response = server_->handler->ProtocolError(500, "internal_error", "internal error");
  }
  if (!result.pending) {
    if (result.response.close_connection) keep_alive = false;
    co_return co_await WriteResponse(result.response, keep_alive) && keep_alive;
  }
  pending_ = std::move(result.pending);
  pending_cancelled_ = false;
  woken_ = false;
  disconnected_ = false;
  watching_ = true;
  net::co_spawn(socket_.get_executor(), Watch(shared_from_this()), net::detached);
  pending_->Start(MakeWake());
  bool ok;
  if (pending_->streaming()) {
    if (result.response.close_connection) keep_alive = false;
    ok = co_await Stream(result.response, keep_alive);
  } else {
    ok = co_await AwaitWhole(keep_alive);
  }
  pending_.reset();
  co_return ok&& keep_alive;
}

awaitable<void> Session::Run(std::shared_ptr<Session> self) {
  if (self->refuse_) co_await self->Refuse();
  while (!self->closed_ && !self->refuse_) {
    bhttp::request_parser<bhttp::string_body> parser;
    self->exchange_headers_.clear();  // a protocol error answered while reading carries none
    if (!co_await self->ReadRequest(parser)) break;
    self->server_->num_requests_total++;
    self->server_->num_exchanges++;
    const bool keep_alive = co_await self->Exchange(parser.release());
    self->server_->num_exchanges--;
    if (!keep_alive) break;
  }
  self->CancelPending();
  if (self->watching_) co_await self->StopWatching();
  self->ReleaseWakeTarget();
  if (self->linger_ && !self->closed_) {
    co_await self->LingerClose(self->refuse_ ? Clock::duration(kRefusedLingerTime)
                                             : Clock::duration(kLingerTime));
  }
  error_code ignored;
  self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
  self->socket_.close(ignored);
  self->Disarm(self->read_timer_, self->read_generation_);
  self->Disarm(self->write_timer_, self->write_generation_);
}

awaitable<void> HttpServer::Impl::Accept() {
  std::chrono::milliseconds backoff = kMinAcceptBackoff;
  while (acceptor.is_open()) {
    tcp::socket socket(net::make_strand(ioc));
    error_code ec;
    co_await acceptor.async_accept(socket, Redirect(ec));
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      co_await BackOff(ec, &backoff);
      continue;
    }
    backoff = kMinAcceptBackoff;
    Admit(std::move(socket));
  }
}

// Out of descriptors, accept() fails at once as long as the backlog holds a connection: without
// a pause the loop would spin a core and log a line per try.
awaitable<void> HttpServer::Impl::BackOff(const error_code& ec,
                                          std::chrono::milliseconds* backoff) {
  num_accept_errors_total++;
  if (int64_t suppressed = 0; accept_error_log.Due(&suppressed)) {
    LOG_WARN("http",
             "accept failed: {} ({} more failures since the last message); retrying in {} ms; "
             "{} connections open (limit {})",
             ec.message(), suppressed, backoff->count(), NumServed(), options.max_connections);
  }
  accept_backoff.expires_after(*backoff);
  error_code ignored;
  co_await accept_backoff.async_wait(Redirect(ignored));
  *backoff = std::min<std::chrono::milliseconds>(*backoff * 2, kMaxAcceptBackoff);
}

void HttpServer::Impl::Admit(tcp::socket socket) {
  error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  const int64_t served = NumServed();
  const bool refuse = served >= options.max_connections;
  if (refuse) {
    num_refused_total++;
    if (int64_t suppressed = 0; refused_log.Due(&suppressed)) {
      LOG_WARN("http",
               "refused a connection: {} open, the limit (--max-connections) is {} ({} more "
               "refused since the last message)",
               served, options.max_connections, suppressed);
    }
    if (num_refusing.load() >= kMaxLingeringRefused) {
      RefuseAtOnce(socket);
      return;
    }
  }
  auto session = std::make_shared<Session>(this, std::move(socket), refuse);
  Register(session);
  net::co_spawn(session->executor(), Session::Run(session), net::detached);
}

HttpResponse HttpServer::Impl::Refusal() {
  HttpResponse response =
      handler->ProtocolError(503, "too_many_connections",
                             absl::StrCat("the server has its limit of ", options.max_connections,
                                          " connections open (--max-connections); retry later"));
  response.headers.push_back({"Retry-After", "1"});
  return response;
}

void HttpServer::Impl::RefuseAtOnce(tcp::socket& socket) {
  const HttpResponse response = Refusal();
  std::string bytes = absl::StrCat("HTTP/1.1 503 Service Unavailable\r\nServer: strata\r\n",
                                   "Content-Type: ", response.content_type, "\r\n");
  for (const Header& h : response.headers) absl::StrAppend(&bytes, h.name, ": ", h.value, "\r\n");
  absl::StrAppend(&bytes, "Connection: close\r\nContent-Length: ", response.body.size(), "\r\n\r\n",
                  response.body);
  error_code ec;
  socket.non_blocking(true, ec);
  socket.send(net::buffer(bytes), 0, ec);
  socket.shutdown(tcp::socket::shutdown_send, ec);
  socket.close(ec);
}

void HttpServer::Impl::Register(const std::shared_ptr<Session>& session) {
  std::lock_guard<std::mutex> lock(mu);
  sessions.emplace(session.get(), session);
}

void HttpServer::Impl::Unregister(Session* session) {
  std::lock_guard<std::mutex> lock(mu);
  sessions.erase(session);
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

int64_t MaxConnectionsForDescriptorLimit(int64_t descriptor_limit) {
  const int64_t reserve = std::clamp<int64_t>(descriptor_limit / 4, 64, 1024);
  return std::max<int64_t>(1, descriptor_limit - reserve);
}

int64_t DefaultMaxConnections() { return MaxConnectionsForDescriptorLimit(DescriptorLimit()); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              HttpHandler* handler) {
  if (options.num_threads < 1) return absl::InvalidArgumentError("num_threads must be >= 1");
  if (options.max_connections < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connections must be >= 0 (0: from the descriptor limit), got ",
                     options.max_connections));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.max_connections == 0) {
    impl->options.max_connections = DefaultMaxConnections();
  } else if (options.max_connections > DescriptorLimit()) {
    LOG_WARN("http",
             "--max-connections {} is over the descriptor limit ({} open files, RLIMIT_NOFILE): "
             "past it accepts fail and back off instead of answering 503",
             options.max_connections, DescriptorLimit());
  }
  impl->handler = handler;
  error_code ec;
  const net::ip::address address = net::ip::make_address(options.host, ec);
  if (ec) return absl::InvalidArgumentError("bad --host '" + options.host + "': " + ec.message());
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(options.port));
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.host, ":", options.port, ": ", ec.message()));
  }
  impl->port = impl->acceptor.local_endpoint().port();
  Impl* raw = impl.get();
  net::co_spawn(impl->acceptor.get_executor(), raw->Accept(), net::detached);
  for (int i = 0; i < options.num_threads; ++i) {
    impl->threads.emplace_back([raw] { raw->ioc.run(); });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port; }

HttpServerStats HttpServer::stats() const {
  HttpServerStats stats;
  stats.num_connections = impl_->NumServed();
  stats.num_exchanges = impl_->num_exchanges.load();
  stats.num_requests_total = impl_->num_requests_total.load();
  stats.num_cancelled_total = impl_->num_cancelled_total.load();
  stats.max_connections = impl_->options.max_connections;
  stats.num_refused_total = impl_->num_refused_total.load();
  stats.num_accept_errors_total = impl_->num_accept_errors_total.load();
  return stats;
}

void HttpServer::StopAccepting() {
  if (impl_->threads.empty()) return;  // stopped
  std::promise<void> done;
  net::post(impl_->acceptor.get_executor(), [this, &done] {
    error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->accept_backoff.cancel();
    done.set_value();
  });
  done.get_future().wait();
}

void HttpServer::Stop() {
  if (impl_->stopped.exchange(true)) return;
  StopAccepting();
  // Collected under the lock, released outside it: dropping the last reference to a session
  // runs its destructor, which takes the lock to unregister.
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& [raw, weak] : impl_->sessions) {
      if (auto session = weak.lock()) open.push_back(std::move(session));
    }
  }
  for (std::shared_ptr<Session>& session : open) {
    net::post(session->executor(), [session] { session->CloseNow(); });
  }
  open.clear();
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  while (impl_->NumSessions() > 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->work.reset();
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace strata::http
