// HTTP layer benchmark (not a test): what the OpenAI front end and the HTTP transport add on
// top of submitting to the engine directly, measured in the same run (docs/performance.md: ratios,
// not absolute times).
//
//   1. latency of a `max_tokens: 1` chat call, sequential, p50 / p99:
//        direct   EngineLoop::Submit of the same prompt ids, wait for the end
//        http     POST /v1/chat/completions over a keep-alive loopback connection
//      → added latency of the HTTP layer (tokenize + chat template + JSON + socket) = http − direct
//   2. requests/s of the same call with --concurrency clients, direct vs http
//   3. SSE throughput: one long stream from a scripted executor (no model: an upper bound on the
//      tokens/s the HTTP layer can carry), tokens/s and MB/s through SSE vs draining the engine
//      stream directly.
//
//   http_bench [--requests N] [--concurrency K] [--stream-tokens T]   (demo model, generated
//   into $STRATA_CACHE_DIR on first use)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "server/cli/serve_runtime.h"
#include "server/frontend/openai_service.h"
#include "server/frontend/prompt_builder.h"
#include "server/frontend/testing/scripted_executor.h"
#include "server/http/http_server.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// A keep-alive HTTP/1.1 client on a loopback socket (just enough for this benchmark).
class Client {
 public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }
  ~Client() { close(fd_); }

  // POSTs `body`; returns the response body (Content-Length framing) and counts received
  // bytes. With `until_done`, reads a chunked SSE stream until "data: [DONE]".
  std::string Post(const std::string& path, const std::string& body, bool until_done = false) {
    const std::string request = "POST " + path +
                                " HTTP/1.1\r\nHost: b\r\nContent-Type: "
                                "application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    CHECK(send(fd_, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size()));
    std::string in;
    char buf[65536];
    while (true) {
      if (until_done) {
        if (in.find("data: [DONE]") != std::string::npos &&
            in.find("\r\n0\r\n\r\n") != std::string::npos) {
          break;
        }
      } else if (size_t head = in.find("\r\n\r\n"); head != std::string::npos) {
        const size_t cl = in.find("Content-Length: ");
        CHECK(cl != std::string::npos && cl < head);
        const size_t length = std::stoul(in.substr(cl + 16));
        if (in.size() >= head + 4 + length) return in.substr(head + 4, length);
      }
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      CHECK(n > 0) << "connection closed after: " << in;
      in.append(buf, static_cast<size_t>(n));
    }
    return in;
  }

 private:
  int fd_ = -1;
};

void WaitEnd(const std::shared_ptr<server::RequestStream>& stream, int64_t* num_tokens) {
  while (true) {
    std::optional<server::StreamEvent> e = stream->Next(absl::Seconds(60));
    CHECK(e.has_value()) << "engine stalled";
    if (num_tokens) *num_tokens += static_cast<int64_t>(e->token_ids.size());
    if (e->terminal()) return;
  }
}

scheduler::Request EngineRequest(const std::vector<int32_t>& prompt, int64_t max_tokens, int i) {
  scheduler::Request r;
  r.request_id = "bench-" + std::to_string(i);
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

struct LatencyResult {
  std::vector<double> direct_ms, http_ms;
};

LatencyResult MeasureLatency(const frontend::ServedModel& m, int port, int n) {
  const std::string body =
      R"({"messages": [{"role": "user", "content": "Hello, Strata!"}], "max_tokens": 1,
          "temperature": 0, "ignore_eos": true})";
  frontend::ChatCompletionRequest req;
  req.messages = frontend::Json::parse(R"([{"role": "user", "content": "Hello, Strata!"}])");
  const std::vector<int32_t> prompt = *frontend::ChatPromptIds(m, req);
  LatencyResult r;
  Client client(port);
  for (int i = 0; i < n + 5; ++i) {  // the first 5 of each warm up
    auto t0 = Clock::now();
    auto stream = m.engine->Submit(EngineRequest(prompt, 1, i));
    CHECK(stream.ok()) << stream.status();
    WaitEnd(*stream, nullptr);
    if (i >= 5) r.direct_ms.push_back(Ms(Clock::now() - t0));
    t0 = Clock::now();
    const std::string reply = client.Post("/v1/chat/completions", body);
    CHECK(reply.find("\"finish_reason\":\"length\"") != std::string::npos) << reply;
    if (i >= 5) r.http_ms.push_back(Ms(Clock::now() - t0));
  }
  return r;
}

// Requests/s with `k` concurrent clients for `n` requests in all.
std::pair<double, double> MeasureThroughput(const frontend::ServedModel& m, int port, int n,
                                            int k) {
  frontend::ChatCompletionRequest req;
  req.messages = frontend::Json::parse(R"([{"role": "user", "content": "Hello, Strata!"}])");
  const std::vector<int32_t> prompt = *frontend::ChatPromptIds(m, req);
  std::atomic<int> next{0};
  auto run = [&](bool http) {
    next = 0;
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < k; ++t) {
      threads.emplace_back([&, http] {
        std::unique_ptr<Client> client = http ? std::make_unique<Client>(port) : nullptr;
        for (int i = next++; i < n; i = next++) {
          if (http) {
            client->Post("/v1/chat/completions",
                         R"({"messages": [{"role": "user", "content": "Hello, Strata!"}],
                             "max_tokens": 1, "temperature": 0, "ignore_eos": true})");
          } else {
            auto stream = m.engine->Submit(EngineRequest(prompt, 1, 100000 + i));
            CHECK(stream.ok());
            WaitEnd(*stream, nullptr);
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return n / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const double direct = run(false);
  const double http = run(true);
  return {direct, http};
}

void MeasureSse(int num_tokens) {
  frontend::testing::FixtureOptions options;
  options.max_model_len = num_tokens + 64;
  frontend::testing::Fixture fixture(options);
  frontend::OpenAiService service(frontend::ServiceOptions{});
  service.SetModel(&fixture.served());
  http::HttpServerOptions http_options;
  http_options.host = "127.0.0.1";
  http_options.port = 0;
  auto server = http::HttpServer::Start(http_options, &service);
  CHECK(server.ok()) << server.status();
  // Direct: drain the engine stream of the same request.
  const std::vector<int32_t> prompt = fixture.Ids("hello");
  auto t0 = Clock::now();
  int64_t tokens = 0;
  auto stream = fixture.engine().Submit(EngineRequest(prompt, num_tokens, 1));
  CHECK(stream.ok());
  WaitEnd(*stream, &tokens);
  const double direct_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // HTTP: the same through /v1/completions as SSE.
  Client client((*server)->port());
  t0 = Clock::now();
  const std::string body =
      client.Post("/v1/completions",
                  R"({"prompt": "hello", "stream": true, "ignore_eos": true, "temperature": 0,
          "max_tokens": )" +
                      std::to_string(num_tokens) + "}",
                  /*until_done=*/true);
  const double http_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf(
      "sse: %d tokens; direct engine stream %.0f tokens/s; through HTTP/SSE %.0f "
      "tokens/s, %.1f MB/s (%zu bytes); ratio %.2f\n",
      num_tokens, static_cast<double>(tokens) / direct_s, num_tokens / http_s,
      static_cast<double>(body.size()) / http_s / 1e6, body.size(),
      (num_tokens / http_s) / (static_cast<double>(tokens) / direct_s));
  (*server)->Stop();
}

// Milliseconds to parse, validate, render the chat template and tokenize the request body.
double FrontEndMs(const frontend::ServedModel& m, int n) {
  const std::string body = R"({"messages": [{"role": "user", "content": "Hello, Strata!"}],
                               "max_tokens": 1, "temperature": 0, "ignore_eos": true})";
  frontend::RequestLimits limits;
  limits.vocab_size = m.vocab_size;
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    auto json = frontend::ParseJsonBody(body);
    auto req = frontend::ParseChatCompletionRequest(*json, limits);
    auto ids = frontend::ChatPromptIds(m, *req);
    CHECK(ids.ok());
    ms.push_back(Ms(Clock::now() - t0));
  }
  return Percentile(ms, 0.5);
}

void Report(const char* label, const frontend::ServedModel& model, int port, int requests,
            int concurrency) {
  std::printf("%s: front end (JSON, validation, chat template, tokenizer) p50 %.3f ms\n", label,
              FrontEndMs(model, requests));
  LatencyResult lat = MeasureLatency(model, port, requests);
  const double d50 = Percentile(lat.direct_ms, 0.5), d99 = Percentile(lat.direct_ms, 0.99);
  const double h50 = Percentile(lat.http_ms, 0.5), h99 = Percentile(lat.http_ms, 0.99);
  std::printf(
      "%s: latency of a max_tokens 1 chat call, %d sequential requests:\n"
      "  direct engine p50 %.2f ms p99 %.2f ms; HTTP p50 %.2f ms p99 %.2f ms\n"
      "  added by the HTTP layer: p50 %.2f ms, p99 %.2f ms (%.1f%% of the HTTP p50)\n",
      label, requests, d50, d99, h50, h99, h50 - d50, h99 - d99, 100.0 * (h50 - d50) / h50);
  const auto [direct_rps, http_rps] = MeasureThroughput(model, port, requests * 2, concurrency);
  std::printf("%s: requests/s with %d clients: direct %.1f, HTTP %.1f (ratio %.2f)\n", label,
              concurrency, direct_rps, http_rps, http_rps / direct_rps);
}

int Main(int argc, char** argv) {
  int requests = 100, concurrency = 8, stream_tokens = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--requests") requests = value;
    if (flag == "--concurrency") concurrency = value;
    if (flag == "--stream-tokens") stream_tokens = value;
  }
  log::SetLevel(log::Level::kWarn);
  cli::ServeOptions options;
  options.kv_cache_memory_bytes = int64_t{256} << 20;
  auto runtime = cli::ModelRuntime::Load(options);
  CHECK(runtime.ok()) << runtime.status();
  frontend::OpenAiService service(frontend::ServiceOptions{});
  service.SetModel(&(*runtime)->served());
  http::HttpServerOptions http_options;
  http_options.host = "127.0.0.1";
  http_options.port = 0;
  auto server = http::HttpServer::Start(http_options, &service);
  CHECK(server.ok()) << server.status();
  const int port = (*server)->port();

  Report("demo model", (*runtime)->served(), port, requests, concurrency);
  (*server)->Stop();
  {
    // The same with a scripted executor (no model): the engine costs ~nothing, so the gap is
    // the front end and transport alone.
    frontend::testing::Fixture fixture;
    frontend::OpenAiService fake_service(frontend::ServiceOptions{});
    fake_service.SetModel(&fixture.served());
    auto fake_server = http::HttpServer::Start(http_options, &fake_service);
    CHECK(fake_server.ok()) << fake_server.status();
    Report("no model (scripted executor)", fixture.served(), (*fake_server)->port(), requests * 5,
           concurrency);
    (*fake_server)->Stop();
  }
  MeasureSse(stream_tokens);
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
