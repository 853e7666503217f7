// HttpResponseReader: an incremental reader of one HTTP/1.1 response, for the load generator,
// which reads its socket in pieces of any size: the status line and headers, then the body —
// chunked, Content-Length or up to the connection's close — and, when the body is a
// `text/event-stream`, the Server-Sent Events in it (the `data:` payloads, multi-line data
// joined with '\n').
//
// Bad input (a malformed status line or chunk size, headers over kMaxHeaderBytes, data after
// the end) is an error naming what was wrong; the reader then accepts nothing more.
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace strata::bench_serve {

class HttpResponseReader {
 public:
  static constexpr int64_t kMaxHeaderBytes = 64 << 10;

  // Bytes read from the connection, in order.
  absl::Status Feed(absl::string_view bytes);
  // The peer closed the connection: ends a body delimited by the close; an error when the
  // response was cut short.
  absl::Status Close();

  bool headers_done() const { return state_ > State::kHeaders; }
  bool complete() const { return state_ == State::kDone; }
  int status() const { return status_; }
  bool event_stream() const { return event_stream_; }
  // SSE `data:` payloads completed since the last call (event-stream bodies).
  std::vector<std::string> TakeEvents();
  // The body of a response that is not an event stream.
  const std::string& body() const { return body_; }

 private:
  enum class State {
    kStatusLine,
    kHeaders,
    kChunkSize,
    kChunkData,
    kChunkEnd,
    kTrailers,
    kBody,
    kDone,
    kFailed,
  };
  absl::Status Fail(std::string message);
  // One header line (no CRLF); an empty one ends the headers.
  absl::Status HeaderLine(absl::string_view line);
  absl::Status ChunkSizeLine(absl::string_view line);
  void BodyBytes(absl::string_view bytes);
  void EventLine(absl::string_view line);

  State state_ = State::kStatusLine;
  std::string line_;  // the partial line being read (status, headers, chunk sizes, events)
  int64_t header_bytes_ = 0;
  int status_ = 0;
  bool chunked_ = false, event_stream_ = false;
  int64_t remaining_ = -1;  // bytes left in the current chunk, or of a Content-Length body
  std::string body_;
  std::string event_line_, event_data_;
  bool has_data_ = false;
  std::vector<std::string> events_;
};

}  // namespace strata::bench_serve
