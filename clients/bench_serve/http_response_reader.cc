#include "clients/bench_serve/http_response_reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace strata::bench_serve {

absl::Status HttpResponseReader::Fail(std::string message) {
  state_ = State::kFailed;
  return absl::DataLossError(absl::StrCat("malformed HTTP response: ", message));
}

absl::Status HttpResponseReader::Feed(absl::string_view bytes) {
  while (!bytes.empty()) {
    switch (state_) {
      case State::kFailed:
        return absl::FailedPreconditionError("the response was already malformed");
      case State::kDone:
        return Fail(absl::StrCat(bytes.size(), " bytes after the end of the response"));
      case State::kChunkData:
      case State::kBody: {
        const auto take = static_cast<size_t>(
            remaining_ < 0 ? static_cast<int64_t>(bytes.size())
                           : std::min<int64_t>(remaining_, static_cast<int64_t>(bytes.size())));
        BodyBytes(bytes.substr(0, take));
        bytes.remove_prefix(take);
        if (remaining_ >= 0) remaining_ -= static_cast<int64_t>(take);
        if (remaining_ == 0) state_ = state_ == State::kChunkData ? State::kChunkEnd : State::kDone;
        break;
      }
      default: {  // line-oriented states
        const size_t end = bytes.find('\n');
        const absl::string_view piece = bytes.substr(0, end);
        if (state_ <= State::kHeaders) {
          header_bytes_ += static_cast<int64_t>(piece.size()) + 1;
          if (header_bytes_ > kMaxHeaderBytes) {
            return Fail(absl::StrCat("headers over ", kMaxHeaderBytes, " bytes"));
          }
        } else if (line_.size() + piece.size() > 4096) {
          return Fail("a chunk-size or trailer line over 4096 bytes");
        }
        line_.append(piece.data(), piece.size());
        if (end == absl::string_view::npos) return absl::OkStatus();
        bytes.remove_prefix(end + 1);
        std::string line = std::move(line_);
        line_.clear();
        if (!line.empty() && line.back() == '\r') line.pop_back();
        absl::Status s;
        if (state_ == State::kStatusLine) {
          // "HTTP/1.1 200 OK"
          absl::string_view v = line;
          if (!absl::ConsumePrefix(&v, "HTTP/1.") || v.size() < 5 || v[1] != ' ' ||
              !absl::SimpleAtoi(v.substr(2, 3), &status_)) {
            return Fail(absl::StrCat("status line '", line, "'"));
          }
          state_ = State::kHeaders;
        } else if (state_ == State::kHeaders) {
          s = HeaderLine(line);
        } else if (state_ == State::kChunkSize) {
          s = ChunkSizeLine(line);
        } else if (state_ == State::kChunkEnd) {
          if (!line.empty()) return Fail("no CRLF after a chunk's data");
          state_ = State::kChunkSize;
        } else if (state_ == State::kTrailers) {
          if (line.empty()) state_ = State::kDone;
        }
        if (!s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status HttpResponseReader::HeaderLine(absl::string_view line) {
  if (line.empty()) {
    if (chunked_) {
      state_ = State::kChunkSize;
    } else if (remaining_ == 0 || status_ == 204 || status_ == 304) {
      state_ = State::kDone;
    } else {
      state_ = State::kBody;  // Content-Length, or to the close
    }
    return absl::OkStatus();
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return Fail(absl::StrCat("header line '", line, "'"));
  const std::string name = absl::AsciiStrToLower(line.substr(0, colon));
  const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (name == "transfer-encoding") {
    chunked_ = absl::StrContains(absl::AsciiStrToLower(value), "chunked");
  } else if (name == "content-length") {
    if (!absl::SimpleAtoi(value, &remaining_) || remaining_ < 0) {
      return Fail(absl::StrCat("Content-Length '", value, "'"));
    }
  } else if (name == "content-type") {
    event_stream_ = absl::StartsWithIgnoreCase(value, "text/event-stream");
  }
  return absl::OkStatus();
}

absl::Status HttpResponseReader::ChunkSizeLine(absl::string_view line) {
  const absl::string_view hex = absl::StripAsciiWhitespace(line.substr(0, line.find(';')));
  uint64_t size = 0;
  if (hex.empty() || hex.size() > 15 || !absl::SimpleHexAtoi(hex, &size)) {
    return Fail(absl::StrCat("chunk size '", line, "'"));
  }
  remaining_ = static_cast<int64_t>(size);
  state_ = size == 0 ? State::kTrailers : State::kChunkData;
  return absl::OkStatus();
}

void HttpResponseReader::BodyBytes(absl::string_view bytes) {
  if (!event_stream_) {
    body_.append(bytes.data(), bytes.size());
    return;
  }
  while (!bytes.empty()) {
    const size_t end = bytes.find('\n');
    const absl::string_view part = bytes.substr(0, end);
    event_line_.append(part.data(), part.size());
    if (end == absl::string_view::npos) return;
    bytes.remove_prefix(end + 1);
    if (!event_line_.empty() && event_line_.back() == '\r') event_line_.pop_back();
    EventLine(event_line_);
    event_line_.clear();
  }
}

// SSE: "data: x" lines accumulate, a blank line dispatches; comments and other fields are
// skipped.
void HttpResponseReader::EventLine(absl::string_view line) {
  if (line.empty()) {
    if (has_data_) events_.push_back(std::move(event_data_));
    event_data_.clear();
    has_data_ = false;
    return;
  }
  if (!absl::ConsumePrefix(&line, "data:")) return;
  absl::ConsumePrefix(&line, " ");
  if (has_data_) event_data_.push_back('\n');
  event_data_.append(line.data(), line.size());
  has_data_ = true;
}

absl::Status HttpResponseReader::Close() {
  if (state_ == State::kBody && remaining_ < 0) state_ = State::kDone;
  if (state_ == State::kDone) {
    if (event_stream_) {  // a last line without its newline, a last event without its blank line
      if (!event_line_.empty()) EventLine(event_line_);
      event_line_.clear();
      EventLine("");
    }
    return absl::OkStatus();
  }
  if (state_ == State::kFailed) return absl::FailedPreconditionError("malformed response");
  return absl::DataLossError(headers_done() ? "the connection closed before the response ended"
                                            : "the connection closed before a response");
}

std::vector<std::string> HttpResponseReader::TakeEvents() { return std::exchange(events_, {}); }

}  // namespace strata::bench_serve
