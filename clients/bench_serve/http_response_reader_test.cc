// HttpResponseReader over responses cut into pieces at every possible place.
#include "clients/bench_serve/http_response_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata::bench_serve {
namespace {

struct Read {
  int status = 0;
  bool complete = false;
  std::vector<std::string> events;
  std::string body;
};

// Feeds `response` in pieces of `piece` bytes (then closes the connection when `close`).
Read ReadIn(const std::string& response, size_t piece, bool close) {
  HttpResponseReader reader;
  Read out;
  for (size_t at = 0; at < response.size(); at += piece) {
    const absl::Status fed = reader.Feed(response.substr(at, piece));
    EXPECT_TRUE(fed.ok()) << fed << " at " << at;
    for (std::string& e : reader.TakeEvents()) out.events.push_back(std::move(e));
  }
  if (close) {
    EXPECT_TRUE(reader.Close().ok());
  }
  for (std::string& e : reader.TakeEvents()) out.events.push_back(std::move(e));
  out.status = reader.status();
  out.complete = reader.complete();
  out.body = reader.body();
  return out;
}

// Chunked SSE as `strata serve` writes it: events split across chunks, a comment (ping), CRLF
// and LF line ends, a two-line data field.
const char kChunkedSse[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    "14\r\ndata: {\"a\": 1}\n\ndata\r\n"
    "1e\r\n: {\"b\": 2}\r\n\r\n: ping\n\ndata: x\n\r\n"
    "17\r\ndata: y\n\ndata: [DONE]\n\n\r\n"
    "0\r\n\r\n";

TEST(HttpResponseReaderTest, ChunkedEventStreamInPiecesOfAnySize) {
  for (size_t piece = 1; piece <= sizeof(kChunkedSse); ++piece) {
    const Read r = ReadIn(kChunkedSse, piece, /*close=*/false);
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(r.complete) << "piece " << piece;
    EXPECT_EQ(r.events, (std::vector<std::string>{"{\"a\": 1}", "{\"b\": 2}", "x\ny", "[DONE]"}))
        << "piece " << piece;
  }
}

TEST(HttpResponseReaderTest, ContentLengthAndCloseDelimitedBodies) {
  const std::string error =
      "HTTP/1.1 400 Bad Request\r\ncontent-length: 11\r\nContent-Type: application/json\r\n\r\n"
      "{\"e\": \"x\"}\n";
  for (size_t piece : {1, 3, 200}) {
    const Read r = ReadIn(error, piece, /*close=*/false);
    EXPECT_EQ(r.status, 400);
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(r.body, "{\"e\": \"x\"}\n");
  }
  const Read closed = ReadIn("HTTP/1.0 200 OK\r\n\r\nhello", 2, /*close=*/true);
  EXPECT_TRUE(closed.complete);
  EXPECT_EQ(closed.body, "hello");
  // An event stream ended by the close, its last event without the blank line.
  const Read sse = ReadIn("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: z", 4,
                          /*close=*/true);
  EXPECT_EQ(sse.events, std::vector<std::string>{"z"});
}

TEST(HttpResponseReaderTest, BadResponsesAreErrorsNamingWhatIsWrong) {
  auto error_of = [](const std::string& response) {
    HttpResponseReader reader;
    absl::Status s = reader.Feed(response);
    if (s.ok()) s = reader.Close();
    return std::string(s.message());
  };
  EXPECT_NE(error_of("SMTP ready\r\n").find("status line"), std::string::npos);
  EXPECT_NE(error_of("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n").find("header line"),
            std::string::npos);
  EXPECT_NE(
      error_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").find("chunk size"),
      std::string::npos);
  EXPECT_NE(error_of("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc").find("closed before"),
            std::string::npos);
  EXPECT_NE(error_of("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab").find("after the end"),
            std::string::npos);
  EXPECT_NE(error_of("HTTP/1.1 200 OK\r\nX: " + std::string(70000, 'a')).find("headers over"),
            std::string::npos);
  EXPECT_NE(error_of("").find("before a response"), std::string::npos);
}

}  // namespace
}  // namespace strata::bench_serve
