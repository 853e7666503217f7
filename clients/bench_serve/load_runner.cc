// The only translation unit with Asio in the load generator (build time, and Boost 1.74's
// coroutine quirks: docs/build-notes.md §8).
#include "clients/bench_serve/load_runner.h"

#include <utility>  // before Asio: Boost 1.74's asio/awaitable.hpp uses std::exchange

#include <array>
#include <chrono>
#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "clients/bench_serve/http_response_reader.h"
#include "clients/bench_serve/stream_chunk.h"

namespace strata::bench_serve {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string RequestText(const Target& target, const std::string& method, const std::string& path,
                        const std::string& body) {
  std::string out = absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: ", target.host, ":",
                                 target.port, "\r\nConnection: close\r\nAccept: */*\r\n");
  if (!target.api_key.empty())
    absl::StrAppend(&out, "Authorization: Bearer ", target.api_key, "\r\n");
  if (!body.empty() || method == "POST") {
    absl::StrAppend(&out, "Content-Type: application/json\r\nContent-Length: ", body.size(),
                    "\r\n");
  }
  absl::StrAppend(&out, "\r\n", body);
  return out;
}

using Buffer = std::array<char, 16384>;

// One read from the socket into the reader, then the end of the stream when the peer closed
// it. Errors: a malformed response, a socket error (`ec` tells which).
asio::awaitable<absl::Status> ReadInto(tcp::socket& socket, HttpResponseReader& reader,
                                       Buffer& buffer, boost::system::error_code& ec) {
  const size_t n = co_await socket.async_read_some(asio::buffer(buffer),
                                                   asio::redirect_error(asio::use_awaitable, ec));
  absl::Status s = n > 0 ? reader.Feed(absl::string_view(buffer.data(), n)) : absl::OkStatus();
  if (s.ok() && ec) {
    s = ec == asio::error::eof ? reader.Close() : absl::UnavailableError(ec.message());
  }
  co_return s;
}

struct Run {
  const LoadOptions& options;
  const std::vector<BenchRequest>& requests;
  const std::vector<double>& arrivals_s;
  tcp::resolver::results_type endpoints;
  std::vector<RequestRecord> records;
  int64_t in_flight = 0;
  Clock::time_point start, last_done;
  std::optional<asio::steady_timer> slot_freed;  // cancelled whenever a request completes
};

asio::awaitable<void> SendOne(Run& run, size_t i) {
  RequestRecord& rec = run.records[i];
  const BenchRequest& req = run.requests[i];
  rec.prompt_len = req.prompt_len;
  const std::string text = RequestText(run.options.target, "POST", run.options.endpoint,
                                       RequestBody(run.options, req).dump());
  const auto executor = co_await asio::this_coro::executor;
  tcp::socket socket(executor);
  asio::steady_timer deadline(executor);
  if (run.options.request_timeout_s > 0) {
    deadline.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(run.options.request_timeout_s)));
    deadline.async_wait([&socket](const boost::system::error_code& ec) {
      if (!ec) socket.close();
    });
  }
  const Clock::time_point sent = Clock::now();
  boost::system::error_code ec;
  co_await asio::async_connect(socket, run.endpoints,
                               asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) {
    co_await asio::async_write(socket, asio::buffer(text),
                               asio::redirect_error(asio::use_awaitable, ec));
  }
  HttpResponseReader reader;
  Buffer buffer;
  Clock::time_point last{};
  int64_t chunks = 0;
  bool done = false;
  std::string error = ec ? absl::StrCat("cannot send the request: ", ec.message()) : "";
  while (error.empty() && !done) {
    const absl::Status s = co_await ReadInto(socket, reader, buffer, ec);
    const Clock::time_point now = Clock::now();
    if (!s.ok()) {
      error = run.options.request_timeout_s > 0 && ec == asio::error::operation_aborted
                  ? absl::StrCat("no complete response within --request-timeout ",
                                 run.options.request_timeout_s, " s")
                  : std::string(s.message());
      break;
    }
    if (reader.headers_done() && reader.status() != 200) {
      if (reader.complete()) {
        error = absl::StrCat("HTTP ", reader.status(), ": ", ErrorMessage(reader.body()));
      }
      continue;
    }
    for (const std::string& event : reader.TakeEvents()) {
      if (event == "[DONE]") {
        done = true;
        continue;
      }
      const StreamChunk c = ParseStreamChunk(event);
      if (c.error) {
        error = *c.error;
        break;
      }
      if (c.step) {
        if (chunks++ == 0) {
          rec.ttft_s = Seconds(now - sent);
        } else {
          rec.itl_s.push_back(Seconds(now - last));
        }
        last = now;
      }
      if (c.prompt_tokens) rec.prompt_len = *c.prompt_tokens;
      if (c.completion_tokens) rec.output_tokens = *c.completion_tokens;
    }
    if (reader.complete() && !done && error.empty()) {
      error = reader.event_stream() ? "the stream ended without [DONE]"
                                    : "a response that is not an event stream";
    }
  }
  deadline.cancel();
  const Clock::time_point end = Clock::now();
  rec.latency_s = Seconds(end - sent);
  if (error.empty() && chunks == 0) error = "no token was streamed";
  rec.success = error.empty();
  rec.error = error;
  if (rec.success && rec.output_tokens == 0) rec.output_tokens = chunks;  // no usage chunk
  run.last_done = std::max(run.last_done, end);
  --run.in_flight;
  run.slot_freed->cancel();
}

asio::awaitable<void> Dispatch(Run& run) {
  const auto executor = co_await asio::this_coro::executor;
  asio::steady_timer wait(executor);
  boost::system::error_code ec;
  run.start = run.last_done = Clock::now();
  for (size_t i = 0; i < run.requests.size(); ++i) {
    wait.expires_at(run.start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(run.arrivals_s[i])));
    co_await wait.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    while (run.options.max_concurrency > 0 && run.in_flight >= run.options.max_concurrency) {
      run.slot_freed->expires_at(Clock::time_point::max());
      co_await run.slot_freed->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    ++run.in_flight;
    asio::co_spawn(executor, SendOne(run, i), asio::detached);
  }
}

}  // namespace

absl::StatusOr<Target> ParseBaseUrl(const std::string& url) {
  absl::string_view rest = url;
  if (absl::StartsWith(rest, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--base-url ", url, ": https is not supported (no TLS); use http://"));
  }
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--base-url must look like http://host:port, got '", url, "'"));
  }
  rest = rest.substr(0, rest.find('/'));
  Target t;
  const size_t colon = rest.rfind(':');
  t.host = std::string(rest.substr(0, colon));
  t.port = colon == absl::string_view::npos ? "80" : std::string(rest.substr(colon + 1));
  int port = 0;
  if (t.host.empty() || !absl::SimpleAtoi(t.port, &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--base-url must look like http://host:port (port 1..65535), got '", url, "'"));
  }
  return t;
}

absl::StatusOr<HttpReply> HttpCall(const Target& target, const std::string& method,
                                   const std::string& path, const std::string& body,
                                   double timeout_s) {
  asio::io_context io;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto endpoints = resolver.resolve(target.host, target.port, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot resolve ", target.host, ": ", ec.message()));
  tcp::socket socket(io);
  asio::steady_timer deadline(io);
  deadline.expires_after(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
  deadline.async_wait([&socket](const boost::system::error_code& e) {
    if (!e) socket.close();
  });
  HttpReply reply;
  absl::Status status = absl::OkStatus();
  const std::string text = RequestText(target, method, path, body);
  // The exchange; the deadline's cancellation lets run() return as soon as it ends.
  auto exchange = [&]() -> asio::awaitable<absl::Status> {
    boost::system::error_code e;
    co_await asio::async_connect(socket, endpoints, asio::redirect_error(asio::use_awaitable, e));
    if (e) {
      co_return absl::UnavailableError(
          absl::StrCat("cannot connect to ", target.host, ":", target.port, ": ", e.message()));
    }
    co_await asio::async_write(socket, asio::buffer(text),
                               asio::redirect_error(asio::use_awaitable, e));
    HttpResponseReader reader;
    Buffer buffer;
    while (!e && !reader.complete()) {
      const absl::Status s = co_await ReadInto(socket, reader, buffer, e);
      if (!s.ok())
        co_return absl::Status(s.code(), absl::StrCat(method, " ", path, ": ", s.message()));
    }
    reply.status = reader.status();
    reply.body = reader.body();
    co_return absl::OkStatus();
  };
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        status = co_await exchange();
        deadline.cancel();
      },
      asio::detached);
  io.run_for(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s + 1)));
  if (!status.ok()) return status;
  if (reply.status == 0)
    return absl::DeadlineExceededError(
        absl::StrCat(method, " ", path, ": no response within ", timeout_s, " s"));
  return reply;
}

Json RequestBody(const LoadOptions& options, const BenchRequest& r) {
  Json body = Json::object();
  body["model"] = options.model;
  if (absl::StrContains(options.endpoint, "chat")) {
    Json message = Json::object();
    message["role"] = "user";
    message["content"] = r.prompt_text;
    body["messages"] = Json::array({message});
    body["max_completion_tokens"] = r.output_len;
  } else {
    if (r.prompt_ids.empty()) {
      body["prompt"] = r.prompt_text;
    } else {
      body["prompt"] = r.prompt_ids;
    }
    body["max_tokens"] = r.output_len;
  }
  body["stream"] = true;
  Json stream_options = Json::object();
  stream_options["include_usage"] = true;
  body["stream_options"] = stream_options;
  for (const auto& [key, value] : options.extra_body.items()) body[key] = value;
  return body;
}

LoadResult RunLoad(const LoadOptions& options, const std::vector<BenchRequest>& requests,
                   const std::vector<double>& arrivals_s) {
  asio::io_context io;
  Run run{options, requests, arrivals_s, {}, {}, 0, {}, {}, std::nullopt};
  run.records.resize(requests.size());
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  run.endpoints = resolver.resolve(options.target.host, options.target.port, ec);
  LoadResult result;
  if (ec) {
    for (RequestRecord& r : run.records)
      r.error = absl::StrCat("cannot resolve ", options.target.host, ": ", ec.message());
    result.records = std::move(run.records);
    return result;
  }
  run.slot_freed.emplace(io);
  asio::co_spawn(io, Dispatch(run), asio::detached);
  io.run();
  result.duration_s = Seconds(run.last_done - run.start);
  result.records = std::move(run.records);
  return result;
}

}  // namespace strata::bench_serve
