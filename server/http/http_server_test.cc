// The HTTP transport over real loopback sockets with a fake handler: keep-alive, pipelining,
// limits, timeouts, 100-continue, SSE chunks and pings, and cancellation when the client goes
// away (before or during a stream) or the server stops.
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace strata::http {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

// Shared between a fake pending response and the test.
struct Script {
  std::mutex mu;
  std::deque<std::string> chunks;
  bool done = false;
  std::function<void()> wake;
  std::atomic<int> cancels{0};
  std::atomic<int> polls{0};

  void Push(std::string chunk, bool last = false) {
    std::function<void()> w;
    {
      std::lock_guard<std::mutex> lock(mu);
      chunks.push_back(std::move(chunk));
      done = done || last;
      w = wake;
    }
    if (w) w();
  }
};

class FakePending : public PendingResponse {
 public:
  FakePending(std::shared_ptr<Script> script, bool streaming)
      : script_(std::move(script)), streaming_(streaming) {}
  bool streaming() const override { return streaming_; }
  void Start(std::function<void()> wake) override {
    std::lock_guard<std::mutex> lock(script_->mu);
    script_->wake = std::move(wake);
  }
  bool Poll(HttpResponse* out) override {
    script_->polls++;
    std::lock_guard<std::mutex> lock(script_->mu);
    if (!streaming_ && !script_->done) return false;
    std::string body;
    while (!script_->chunks.empty()) {
      body += script_->chunks.front();
      script_->chunks.pop_front();
    }
    if (streaming_) {
      out->body += body;
    } else if (script_->done) {
      out->status = 200;
      out->body = body;
    }
    return script_->done;
  }
  std::string_view keepalive_bytes() const override { return ": ping\n\n"; }
  void Cancel() override { script_->cancels++; }

 private:
  std::shared_ptr<Script> script_;
  bool streaming_;
};

class FakeHandler : public HttpHandler {
 public:
  HandlerResult Handle(HttpRequest request) override {
    HandlerResult result;
    if (request.path == "/throw") throw std::runtime_error("a library threw");
    if (request.path == "/stream" || request.path == "/wait") {
      result.response.content_type = "text/event-stream";
      result.pending = std::make_unique<FakePending>(script, request.path == "/stream");
      return result;
    }
    std::string headers;
    for (const Header& h : request.headers) headers += h.name + "=" + h.value + ";";
    result.response.content_type = "text/plain";
    result.response.body = request.method + " " + request.target + " " + request.path + " [" +
                           request.body + "] " + headers;
    return result;
  }
  HttpResponse ProtocolError(int status, std::string_view code, std::string_view message) override {
    HttpResponse r;
    r.status = status;
    r.body =
        "{\"code\":\"" + std::string(code) + "\",\"message\":\"" + std::string(message) + "\"}";
    return r;
  }
  std::shared_ptr<Script> script = std::make_shared<Script>();
};

// A blocking loopback client with a receive timeout.
class Client {
 public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~Client() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  void Send(const std::string& data) {
    ASSERT_EQ(send(fd_, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
  }
  // False when the server reset the connection (or closed it) before all was sent.
  bool TrySend(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Sends `bytes` filler bytes (as a body) without reading; returns how many went out before
  // an error.
  int64_t SendFiller(int64_t bytes) {
    const std::string block(1 << 16, 'x');
    int64_t sent = 0;
    while (sent < bytes) {
      const size_t n = static_cast<size_t>(std::min<int64_t>(bytes - sent, block.size()));
      if (!TrySend(std::string_view(block).substr(0, n))) break;
      sent += static_cast<int64_t>(n);
    }
    return sent;
  }
  // Reads until `pattern` is in the received text, EOF or the timeout; returns all received.
  std::string ReadUntil(const std::string& pattern, int timeout_ms = 3000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (received_.find(pattern) == std::string::npos && !eof_ && Clock::now() < deadline) {
      Receive(deadline);
    }
    return received_;
  }
  // True when the server closed the connection before the timeout.
  bool WaitEof(int timeout_ms = 3000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!eof_ && Clock::now() < deadline) Receive(deadline);
    return eof_;
  }
  std::string& received() { return received_; }

 private:
  void Receive(Clock::time_point deadline) {
    pollfd p{fd_, POLLIN, 0};
    const int ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (poll(&p, 1, std::max(ms, 0)) <= 0) return;
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) {
      eof_ = true;
      return;
    }
    received_.append(buf, static_cast<size_t>(n));
  }
  int fd_ = -1;
  std::string received_;
  bool eof_ = false;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    auto server = HttpServer::Start(options, &handler_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  bool WaitFor(const std::function<bool()>& condition, int timeout_ms = 3000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!condition() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return condition();
  }
  FakeHandler handler_;
  std::unique_ptr<HttpServer> server_;
};

constexpr char kGet[] = "GET /echo?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing: Yes\r\n\r\n";

TEST_F(HttpServerTest, KeepAliveServesRequestsInTurnWithLowerCaseHeaders) {
  StartServer();
  Client c(server_->port());
  c.Send(kGet);
  std::string first = c.ReadUntil("x-thing=Yes;");
  EXPECT_THAT(first, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(first, HasSubstr("GET /echo?x=1 /echo [] host=a;x-thing=Yes;"));
  c.received().clear();
  c.Send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_THAT(c.ReadUntil("[hello]"), HasSubstr("POST /echo /echo [hello]"));
  EXPECT_EQ(server_->stats().num_connections, 1);
  EXPECT_EQ(server_->stats().num_requests_total, 2);
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  StartServer();
  Client c(server_->port());
  c.Send(
      "GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n"
      "POST /three HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc");
  const std::string all = c.ReadUntil("[abc]");
  const size_t one = all.find("GET /one"), two = all.find("GET /two"),
               three = all.find("POST /three");
  ASSERT_NE(one, std::string::npos);
  ASSERT_NE(two, std::string::npos);
  ASSERT_NE(three, std::string::npos);
  EXPECT_LT(one, two);
  EXPECT_LT(two, three);
  EXPECT_TRUE(c.WaitEof());  // Connection: close honoured
}

TEST_F(HttpServerTest, OversizedBodyIs413AndCloses) {
  HttpServerOptions options;
  options.max_body_bytes = 100;
  StartServer(options);
  Client c(server_->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n");
  const std::string reply = c.ReadUntil("}");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(reply, HasSubstr("\"code\":\"request_too_large\""));
  EXPECT_THAT(reply, HasSubstr("limit of 100 bytes"));
  EXPECT_TRUE(c.WaitEof());
}

// A client that streams an oversized body without `Expect: 100-continue` and reads only once
// it has sent everything (as the openai SDK does) must get the 413, not a reset: the server
// drains what follows its answer (lingering close). Before, the server closed with the body
// unread and the client's sends failed with ECONNRESET / EPIPE.
TEST_F(HttpServerTest, OversizedBodyWithoutExpectIsDrainedSoThe413IsRead) {
  HttpServerOptions options;
  options.max_body_bytes = 1 << 20;
  StartServer(options);
  Client c(server_->port());
  constexpr int64_t kBodyBytes = 32 << 20;
  c.Send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(kBodyBytes) +
         "\r\n\r\n");
  EXPECT_EQ(c.SendFiller(kBodyBytes), kBodyBytes);
  const std::string reply = c.ReadUntil("}");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(reply, HasSubstr("Connection: close\r\n"));
  EXPECT_THAT(reply,
              HasSubstr("request body of 33554432 bytes exceeds the limit of 1048576 bytes"));
  EXPECT_TRUE(c.WaitEof());
}

// The same with a chunked body (no Content-Length: the limit is found mid-body).
TEST_F(HttpServerTest, OversizedChunkedBodyIsDrainedSoThe413IsRead) {
  HttpServerOptions options;
  options.max_body_bytes = 1 << 20;
  StartServer(options);
  Client c(server_->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string chunk = "10000\r\n" + std::string(0x10000, 'x') + "\r\n";
  bool sent_all = true;
  for (int i = 0; i < 256 && sent_all; ++i) sent_all = c.TrySend(chunk);  // 16 MiB
  sent_all = sent_all && c.TrySend("0\r\n\r\n");
  EXPECT_TRUE(sent_all);
  const std::string reply = c.ReadUntil("}");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(reply, HasSubstr("request body exceeds the limit of 1048576 bytes"));
  EXPECT_TRUE(c.WaitEof());
}

// A body in a coding the server does not decode is refused (not read as text), naming the
// header and what is supported; identity passes; the connection stays usable.
TEST_F(HttpServerTest, ContentEncodingOtherThanIdentityIs415) {
  StartServer();
  Client c(server_->port());
  c.Send(
      "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\n"
      "abc");
  const std::string reply = c.ReadUntil("}");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 415"));
  EXPECT_THAT(reply, HasSubstr("Accept-Encoding: identity\r\n"));
  EXPECT_THAT(reply, HasSubstr("\"code\":\"unsupported_content_encoding\""));
  EXPECT_THAT(reply, HasSubstr("Content-Encoding 'gzip' is not supported"));
  EXPECT_THAT(reply, HasSubstr("supported Content-Encoding: identity"));
  EXPECT_THAT(reply, Not(HasSubstr("[abc]")));  // the handler never saw it
  c.received().clear();
  c.Send(
      "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Encoding: identity, BR\r\n"
      "Content-Length: 2\r\n\r\nhi");
  EXPECT_THAT(c.ReadUntil("}"), HasSubstr("Content-Encoding 'BR' is not supported"));
  c.received().clear();
  c.Send(
      "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Encoding: Identity\r\nContent-Length: 2\r\n"
      "\r\nok");
  const std::string plain = c.ReadUntil("[ok]");
  EXPECT_THAT(plain, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(plain, HasSubstr("[ok]"));
}

// Past max_connections a new connection is answered 503 (Retry-After, Connection: close) and
// closed, and counted; the open ones are unaffected and a slot freed is used again.
TEST_F(HttpServerTest, ConnectionsOverTheLimitAre503AndCounted) {
  HttpServerOptions options;
  options.max_connections = 2;
  StartServer(options);
  EXPECT_EQ(server_->stats().max_connections, 2);
  auto first = std::make_unique<Client>(server_->port());
  Client second(server_->port());
  ASSERT_TRUE(WaitFor([&] { return server_->stats().num_connections == 2; }));
  Client third(server_->port());
  const std::string refused = third.ReadUntil("}");
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 503"));
  EXPECT_THAT(refused, HasSubstr("Retry-After: 1\r\n"));
  EXPECT_THAT(refused, HasSubstr("Connection: close\r\n"));
  EXPECT_THAT(refused, HasSubstr("\"code\":\"too_many_connections\""));
  EXPECT_THAT(refused, HasSubstr("limit of 2 connections"));
  EXPECT_TRUE(third.WaitEof());
  EXPECT_EQ(server_->stats().num_refused_total, 1);
  second.Send(kGet);
  EXPECT_THAT(second.ReadUntil("x-thing=Yes;"), StartsWith("HTTP/1.1 200"));
  first.reset();
  ASSERT_TRUE(WaitFor([&] { return server_->stats().num_connections == 1; }));
  Client fourth(server_->port());
  fourth.Send(kGet);
  EXPECT_THAT(fourth.ReadUntil("x-thing=Yes;"), StartsWith("HTTP/1.1 200"));
  EXPECT_EQ(server_->stats().num_refused_total, 1);
}

// A refused client that already sent its request still reads the 503 (it is drained too).
TEST_F(HttpServerTest, RefusedClientThatSentARequestReadsThe503) {
  HttpServerOptions options;
  options.max_connections = 1;
  StartServer(options);
  Client first(server_->port());
  ASSERT_TRUE(WaitFor([&] { return server_->stats().num_connections == 1; }));
  Client second(server_->port());
  second.Send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_THAT(second.ReadUntil("}"), StartsWith("HTTP/1.1 503"));
  EXPECT_TRUE(second.WaitEof());
}

TEST(MaxConnections, IsTheDescriptorLimitLessAReserve) {
  EXPECT_EQ(MaxConnectionsForDescriptorLimit(512), 384);
  EXPECT_EQ(MaxConnectionsForDescriptorLimit(1024), 768);
  EXPECT_EQ(MaxConnectionsForDescriptorLimit(65536), 65536 - 1024);
  EXPECT_EQ(MaxConnectionsForDescriptorLimit(200), 200 - 64);
  EXPECT_EQ(MaxConnectionsForDescriptorLimit(40), 1);
  EXPECT_GE(DefaultMaxConnections(), 1);
}

TEST_F(HttpServerTest, OversizedHeadersAre431) {
  HttpServerOptions options;
  options.max_header_bytes = 256;
  StartServer(options);
  Client c(server_->port());
  c.Send("GET /echo HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(1000, 'x') + "\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("}"), StartsWith("HTTP/1.1 431"));
}

TEST_F(HttpServerTest, AHandlerExceptionIs500AndTheServerLivesOn) {
  StartServer();
  Client c(server_->port());
  c.Send("GET /throw HTTP/1.1\r\nHost: a\r\n\r\n");
  const std::string reply = c.ReadUntil("}");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 500"));
  EXPECT_THAT(reply, HasSubstr("\"code\":\"internal_error\""));
  Client again(server_->port());
  again.Send(kGet);
  EXPECT_THAT(again.ReadUntil("x-thing"), StartsWith("HTTP/1.1 200"));
}

TEST_F(HttpServerTest, MalformedRequestIs400) {
  StartServer();
  Client c(server_->port());
  c.Send("THIS IS NOT HTTP\r\n\r\n");
  const std::string reply = c.ReadUntil("}");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(reply, HasSubstr("\"code\":\"malformed_request\""));
  EXPECT_TRUE(c.WaitEof());
}

TEST_F(HttpServerTest, SlowHeadersTimeOutWith408) {
  HttpServerOptions options;
  options.request_timeout = absl::Milliseconds(300);
  StartServer(options);
  Client c(server_->port());
  const auto start = Clock::now();
  c.Send("GET /echo HTTP/1.1\r\nHost: a\r\n");  // and never the blank line
  const std::string reply = c.ReadUntil("}", 3000);
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 408"));
  EXPECT_THAT(reply, HasSubstr("request_timeout"));
  EXPECT_TRUE(c.WaitEof());
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionIsClosedQuietly) {
  HttpServerOptions options;
  options.idle_timeout = absl::Milliseconds(200);
  StartServer(options);
  Client c(server_->port());
  EXPECT_TRUE(c.WaitEof(3000));
  EXPECT_EQ(c.received(), "");
}

TEST_F(HttpServerTest, ExpectContinueGetsAnInterimResponse) {
  StartServer();
  Client c(server_->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("\r\n\r\n"), StartsWith("HTTP/1.1 100 Continue\r\n\r\n"));
  c.Send("ok");
  EXPECT_THAT(c.ReadUntil("[ok]"), HasSubstr("HTTP/1.1 200 OK"));
}

TEST_F(HttpServerTest, StreamWritesChunksPingsWhenSilentAndEnds) {
  HttpServerOptions options;
  options.ping_interval = absl::Milliseconds(100);
  StartServer(options);
  Client c(server_->port());
  c.Send("GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("\r\n\r\n"), HasSubstr("Transfer-Encoding: chunked"));
  handler_.script->Push("data: one\n\n");
  EXPECT_THAT(c.ReadUntil("data: one\n\n"), HasSubstr("text/event-stream"));
  EXPECT_THAT(c.ReadUntil(": ping\n\n"), HasSubstr(": ping\n\n"));
  handler_.script->Push("data: [DONE]\n\n", /*last=*/true);
  EXPECT_THAT(c.ReadUntil("0\r\n\r\n"), HasSubstr("data: [DONE]\n\n\r\n0\r\n\r\n"));
  EXPECT_EQ(handler_.script->cancels, 0);
  // The connection is still usable.
  c.received().clear();
  c.Send(kGet);
  EXPECT_THAT(c.ReadUntil("x-thing"), StartsWith("HTTP/1.1 200"));
}

// CORS on the wire: a preflight is answered without the handler; plain and streamed responses
// to a cross-origin request carry Access-Control-Allow-Origin, others do not.
TEST_F(HttpServerTest, CorsPreflightAndAllowOriginOnEveryResponseKind) {
  StartServer();
  Client c(server_->port());
  c.Send(
      "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: a\r\nOrigin: https://ui.example\r\n"
      "Access-Control-Request-Method: POST\r\n"
      "Access-Control-Request-Headers: content-type\r\n\r\n");
  const std::string preflight = c.ReadUntil("OK");
  EXPECT_THAT(preflight, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(preflight, HasSubstr("Access-Control-Allow-Origin: *\r\n"));
  EXPECT_THAT(preflight, HasSubstr("Access-Control-Allow-Headers: content-type\r\n"));
  c.received().clear();
  c.Send("GET /echo HTTP/1.1\r\nHost: a\r\nOrigin: https://ui.example\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("origin=https"), HasSubstr("Access-Control-Allow-Origin: *\r\n"));
  c.received().clear();
  c.Send(kGet);  // same connection, no Origin: no CORS header left over
  EXPECT_THAT(c.ReadUntil("x-thing=Yes;"), Not(HasSubstr("Access-Control")));
  c.received().clear();
  c.Send("GET /stream HTTP/1.1\r\nHost: a\r\nOrigin: https://ui.example\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("\r\n\r\n"), HasSubstr("Access-Control-Allow-Origin: *\r\n"));
  handler_.script->Push("data: [DONE]\n\n", /*last=*/true);
  EXPECT_THAT(c.ReadUntil("0\r\n\r\n"), HasSubstr("data: [DONE]"));
}

TEST_F(HttpServerTest, ClientCloseMidStreamCancels) {
  StartServer();
  Client c(server_->port());
  c.Send("GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
  handler_.script->Push("data: one\n\n");
  c.ReadUntil("data: one");
  c.Close();
  EXPECT_TRUE(WaitFor([&] { return handler_.script->cancels == 1; }, 2000));
  EXPECT_TRUE(WaitFor([&] { return server_->stats().num_connections == 0; }));
  EXPECT_EQ(server_->stats().num_cancelled_total, 1);
}

TEST_F(HttpServerTest, ClientCloseBeforeAnyByteCancels) {
  StartServer();
  Client c(server_->port());
  c.Send("GET /wait HTTP/1.1\r\nHost: a\r\n\r\n");
  ASSERT_TRUE(WaitFor([&] { return handler_.script->polls > 0; }));
  c.Close();
  EXPECT_TRUE(WaitFor([&] { return handler_.script->cancels == 1; }, 2000));
}

TEST_F(HttpServerTest, ClientThatClosesRightAfterItsRequestCancels) {
  StartServer();
  Client c(server_->port());
  c.Send("GET /wait HTTP/1.1\r\nHost: a\r\n\r\n");
  c.Close();  // likely before the server even parsed the request
  EXPECT_TRUE(WaitFor([&] { return handler_.script->cancels == 1; }, 2000));
}

TEST_F(HttpServerTest, RequestPipelinedDuringAStreamIsServedAfterIt) {
  StartServer();
  Client c(server_->port());
  c.Send("GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
  handler_.script->Push("data: one\n\n");
  c.ReadUntil("data: one");
  c.Send(kGet);  // arrives while the stream is still open
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  handler_.script->Push("data: [DONE]\n\n", /*last=*/true);
  const std::string all = c.ReadUntil("x-thing=Yes;");
  EXPECT_THAT(all, HasSubstr("0\r\n\r\nHTTP/1.1 200 OK"));
  EXPECT_THAT(all, HasSubstr("GET /echo?x=1 /echo"));
  EXPECT_EQ(handler_.script->cancels, 0);
}

TEST_F(HttpServerTest, NonStreamedPendingResponseIsWrittenWhenDone) {
  StartServer();
  Client c(server_->port());
  c.Send("GET /wait HTTP/1.1\r\nHost: a\r\n\r\n");
  ASSERT_TRUE(WaitFor([&] { return handler_.script->polls > 0; }));
  handler_.script->Push("part1 ");
  handler_.script->Push("part2", /*last=*/true);
  const std::string reply = c.ReadUntil("part2");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(reply, HasSubstr("Content-Length: 11\r\n"));
  EXPECT_THAT(reply, HasSubstr("\r\n\r\npart1 part2"));
  EXPECT_EQ(handler_.script->cancels, 0);
}

// on_exchange sees each exchange once, after its response: the status sent, the body bytes
// (a stream's data without chunk framing), 499 for a client gone before any response; not the
// protocol errors answered while reading.
TEST_F(HttpServerTest, EveryExchangeIsReportedWithItsStatusAndBodyBytes) {
  struct Seen {
    std::string method, path;
    int status;
    double seconds;
    int64_t request_bytes, response_bytes;
  };
  std::mutex mu;
  std::vector<Seen> seen;
  HttpServerOptions options;
  options.max_body_bytes = 64;
  options.on_exchange = [&](const ExchangeRecord& r) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back({std::string(r.method), std::string(r.path), r.status, r.seconds,
                    r.request_bytes, r.response_bytes});
  };
  StartServer(options);
  auto count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen.size();
  };
  Client c(server_->port());
  c.Send("POST /echo?q=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello");
  const std::string echoed = c.ReadUntil("[hello]");
  ASSERT_TRUE(WaitFor([&] { return count() == 1; }));
  c.received().clear();
  c.Send("GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
  handler_.script->Push("data: one\n\n");
  handler_.script->Push("data: [DONE]\n\n", /*last=*/true);
  c.ReadUntil("0\r\n\r\n");
  ASSERT_TRUE(WaitFor([&] { return count() == 2; }));
  handler_.script = std::make_shared<Script>();
  Client gone(server_->port());
  gone.Send("GET /wait HTTP/1.1\r\nHost: a\r\n\r\n");
  ASSERT_TRUE(WaitFor([&] { return handler_.script->polls > 0; }));
  gone.Close();
  ASSERT_TRUE(WaitFor([&] { return count() == 3; }));
  Client big(server_->port());  // 413 while reading: not an exchange the handler saw
  big.Send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n");
  EXPECT_THAT(big.ReadUntil("request_too_large"), StartsWith("HTTP/1.1 413"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].path, "/echo");
  EXPECT_EQ(seen[0].status, 200);
  EXPECT_EQ(seen[0].request_bytes, 5);
  const size_t body_start = echoed.find("\r\n\r\n") + 4;
  EXPECT_EQ(seen[0].response_bytes, static_cast<int64_t>(echoed.size() - body_start));
  EXPECT_GE(seen[0].seconds, 0.0);
  EXPECT_EQ(seen[1].path, "/stream");
  EXPECT_EQ(seen[1].status, 200);
  EXPECT_EQ(seen[1].response_bytes, static_cast<int64_t>(std::string("data: one\n\n").size() +
                                                         std::string("data: [DONE]\n\n").size()));
  EXPECT_EQ(seen[2].path, "/wait");
  EXPECT_EQ(seen[2].status, 499);
  EXPECT_EQ(seen[2].response_bytes, 0);
}

// X-Request-Id comes back on whole and streamed responses as sent; not when absent or over
// 256 bytes.
TEST_F(HttpServerTest, XRequestIdIsEchoed) {
  StartServer();
  Client c(server_->port());
  c.Send("GET /echo HTTP/1.1\r\nHost: a\r\nX-Request-Id: trace-7\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("x-request-id=trace-7;"), HasSubstr("X-Request-Id: trace-7\r\n"));
  c.received().clear();
  c.Send(kGet);
  EXPECT_THAT(c.ReadUntil("x-thing=Yes;"), Not(HasSubstr("X-Request-Id")));
  c.received().clear();
  c.Send("GET /stream HTTP/1.1\r\nHost: a\r\nX-Request-Id: s-1\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("\r\n\r\n"), HasSubstr("X-Request-Id: s-1\r\n"));
  handler_.script->Push("data: [DONE]\n\n", /*last=*/true);
  c.ReadUntil("0\r\n\r\n");
  c.received().clear();
  c.Send("GET /echo HTTP/1.1\r\nHost: a\r\nX-Request-Id: " + std::string(257, 'x') + "\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("xxx;"), Not(HasSubstr("X-Request-Id:")));
}

TEST_F(HttpServerTest, StopCancelsPendingAndClosesConnections) {
  StartServer();
  Client c(server_->port());
  c.Send("GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
  c.ReadUntil("\r\n\r\n");
  Client idle(server_->port());
  ASSERT_TRUE(WaitFor([&] { return server_->stats().num_connections == 2; }));
  server_->Stop();
  EXPECT_EQ(handler_.script->cancels, 1);
  EXPECT_TRUE(c.WaitEof());
  EXPECT_TRUE(idle.WaitEof());
}

TEST_F(HttpServerTest, PortInUseIsAnError) {
  StartServer();
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = server_->port();
  auto second = HttpServer::Start(options, &handler_);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("cannot listen"));
}

}  // namespace
}  // namespace strata::http
