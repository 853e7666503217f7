// xtml_output_parser.h: K3's XTML output, one pass over the text with markers held back.
#include "engine/tokenizer/xtml_output_parser.h"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "engine/tokenizer/xtml_argument_value.h"
#include "engine/tokenizer/xtml_markers.h"
#include "engine/tokenizer/xtml_renderer.h"

namespace strata::engine {
namespace {

constexpr size_t npos = std::string::npos;

// The markers, as the detokenizer writes them (control tokens kept, nothing between).
constexpr std::string_view kThinkOpen = "<|open|>think<|sep|>";
constexpr std::string_view kThinkClose = "<|close|>think<|sep|>";
constexpr std::string_view kResponseOpen = "<|open|>response<|sep|>";
constexpr std::string_view kResponseClose = "<|close|>response<|sep|>";
constexpr std::string_view kMessageClose = "<|close|>message<|sep|>";
constexpr std::string_view kToolsOpen = "<|open|>tools<|sep|>";
constexpr std::string_view kToolsClose = "<|close|>tools<|sep|>";
constexpr std::string_view kCallOpen = "<|open|>call";  // then whitespace and the attributes
constexpr std::string_view kCallClose = "<|close|>call<|sep|>";
constexpr std::string_view kArgumentOpen = "<|open|>argument";
constexpr std::string_view kArgumentClose = "<|close|>argument<|sep|>";
constexpr std::string_view kEnd = xtml::kEndOfMessage;
static_assert(kThinkOpen.starts_with(xtml::kOpen) && kThinkOpen.ends_with(xtml::kSep));
static_assert(kThinkClose.starts_with(xtml::kClose) && kCallClose.ends_with(xtml::kSep));

// What kTools keeps of a section with no call in it: enough for any marker it looks for.
constexpr size_t kToolsTail = 24;

// Python's \s (ASCII part) and \w (non-ASCII bytes count as word characters: attribute names
// are ASCII, so this only decides oddities).
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
         (c >= '\x1c' && c <= '\x1f');
}
bool IsWordChar(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_' ||
         u >= 0x80;
}

// The longest proper prefix of any of `markers` that `text` ends with.
size_t MarkerPrefixAtEnd(std::string_view text, const std::vector<std::string_view>& markers) {
  size_t best = 0;
  for (std::string_view marker : markers) {
    for (size_t n = std::min(marker.size() - 1, text.size()); n > best; --n) {
      if (text.substr(text.size() - n) == marker.substr(0, n)) {
        best = n;
        break;
      }
    }
  }
  return best;
}

// A cut marker: held-back text that already holds a marker's opening control token.
bool IsCutMarker(std::string_view held) {
  return held.substr(0, xtml::kOpen.size()) == xtml::kOpen ||
         held.substr(0, xtml::kClose.size()) == xtml::kClose;
}

// The attributes `name="value"` of an element's head, as the anchors' regex
// (\w+)="([^"]*)" finds them; a repeated name takes its last value; values unescaped
// (&quot; first, then &amp;: the reverse of the encoder's order).
absl::flat_hash_map<std::string, std::string> ParseAttributes(std::string_view head) {
  absl::flat_hash_map<std::string, std::string> attributes;
  size_t i = 0;
  while (i < head.size()) {
    if (!IsWordChar(head[i])) {
      ++i;
      continue;
    }
    size_t name_end = i;
    while (name_end < head.size() && IsWordChar(head[name_end])) ++name_end;
    if (name_end + 1 < head.size() && head[name_end] == '=' && head[name_end + 1] == '"') {
      const size_t value_start = name_end + 2;
      const size_t value_end = head.find('"', value_start);
      if (value_end != npos) {
        std::string value(head.substr(value_start, value_end - value_start));
        absl::StrReplaceAll({{"&quot;", "\""}}, &value);
        absl::StrReplaceAll({{"&amp;", "&"}}, &value);
        attributes[std::string(head.substr(i, name_end - i))] = std::move(value);
        i = value_end + 1;
        continue;
      }
    }
    // No match at i; the regex tries the next position (a shorter name ends the same way).
    i = name_end;
  }
  return attributes;
}

// Position of the next `open` (a tag name) followed by whitespace at or after `from`, before
// `limit`; npos when none; *need_more when the text ends right after the tag name.
size_t FindOpenWithSpace(std::string_view text, std::string_view open, size_t from, size_t limit,
                         bool* need_more) {
  *need_more = false;
  for (size_t at = text.find(open, from); at != npos && at < limit; at = text.find(open, at + 1)) {
    const size_t next = at + open.size();
    if (next == text.size()) {
      *need_more = true;
      return npos;
    }
    if (IsSpace(text[next])) return at;
  }
  return npos;
}

// The argument blocks of a call's body, as the anchors' regex finds them: an argument head up
// to the first <|sep|>, its value up to the first <|close|>argument<|sep|>.
std::string ArgumentsJson(std::string_view body) {
  std::vector<std::pair<std::string, std::string>> entries;
  size_t from = 0;
  while (true) {
    bool need_more = false;
    const size_t open = FindOpenWithSpace(body, kArgumentOpen, from, body.size(), &need_more);
    if (open == npos) break;
    const size_t head_start = open + kArgumentOpen.size();
    const size_t sep = body.find(xtml::kSep, head_start);
    if (sep == npos) break;
    const size_t value_start = sep + xtml::kSep.size();
    const size_t close = body.find(kArgumentClose, value_start);
    if (close == npos) break;
    const absl::flat_hash_map<std::string, std::string> attributes =
        ParseAttributes(body.substr(head_start, sep - head_start));
    const auto key = attributes.find("key");
    const auto type = attributes.find("type");
    std::optional<std::string_view> type_name;
    if (type != attributes.end()) type_name = type->second;
    entries.emplace_back(
        key == attributes.end() ? "" : key->second,
        xtml::ArgumentValueJson(body.substr(value_start, close - value_start), type_name));
    from = close + kArgumentClose.size();
  }
  return xtml::ArgumentsObjectJson(entries);
}

}  // namespace

bool RepliesInXtml(const Tokenizer& tokenizer) {
  return UsesXtml(tokenizer) && CheckXtmlControlTokens(tokenizer).ok();
}

std::string RandomToolCallId() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return absl::StrFormat("chatcmpl-tool-%016x%016x", generator(), generator());
}

XtmlOutput ParseXtmlOutput(std::string_view text, XtmlOutputOptions options) {
  XtmlOutputStreamParser parser(std::move(options));
  XtmlOutput out = parser.Add(text);
  XtmlOutput rest = parser.Finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  for (ToolCall& call : rest.tool_calls) out.tool_calls.push_back(std::move(call));
  return out;
}

XtmlOutputStreamParser::XtmlOutputStreamParser(XtmlOutputOptions options)
    : options_(std::move(options)),
      state_(options_.thinking ? State::kThinkStart : State::kBody),
      call_open_(npos),
      call_sep_(npos) {}

XtmlOutput XtmlOutputStreamParser::Add(std::string_view text) {
  XtmlOutput out;
  if (state_ == State::kDone) return out;
  buffer_.append(text);
  Step(/*end_of_stream=*/false, &out);
  return out;
}

XtmlOutput XtmlOutputStreamParser::Finish() {
  XtmlOutput out;
  Step(/*end_of_stream=*/true, &out);
  // Only a held-back marker prefix is left in the reasoning or the body.
  if (!IsCutMarker(buffer_)) {
    if (state_ == State::kReasoning) out.reasoning += buffer_;
    if (state_ == State::kBody) out.content += buffer_;
  }
  buffer_.clear();
  state_ = State::kDone;
  return out;
}

void XtmlOutputStreamParser::Step(bool end_of_stream, XtmlOutput* out) {
  bool progress = true;
  while (progress) {
    switch (state_) {
      case State::kThinkStart:
        progress = StepThinkStart(end_of_stream);
        break;
      case State::kReasoning:
        progress = StepReasoning(out);
        break;
      case State::kBody:
        progress = StepBody(out);
        break;
      case State::kAfterResponse:
        progress = StepAfterResponse();
        break;
      case State::kTools:
        progress = StepTools(out);
        break;
      case State::kDone:
        buffer_.clear();
        progress = false;
        break;
    }
  }
}

bool XtmlOutputStreamParser::StepThinkStart(bool end_of_stream) {
  if (buffer_.size() < kThinkOpen.size() && !end_of_stream &&
      std::string_view(kThinkOpen).substr(0, buffer_.size()) == buffer_) {
    return false;  // may still become <|open|>think<|sep|>
  }
  if (buffer_.starts_with(kThinkOpen)) {
    buffer_.erase(0, kThinkOpen.size());
  } else if (end_of_stream && kThinkOpen.starts_with(buffer_) && IsCutMarker(buffer_)) {
    buffer_.clear();  // the text is a cut <|open|>think
  }
  state_ = State::kReasoning;
  return true;
}

void XtmlOutputStreamParser::EmitAllButMarkerPrefix(const std::vector<std::string_view>& markers,
                                                    std::string* out) {
  const size_t keep = MarkerPrefixAtEnd(buffer_, markers);
  out->append(buffer_, 0, buffer_.size() - keep);
  buffer_.erase(0, buffer_.size() - keep);
}

bool XtmlOutputStreamParser::StepReasoning(XtmlOutput* out) {
  const size_t close = buffer_.find(kThinkClose);
  const size_t end = buffer_.find(kEnd);
  if (close == npos && end == npos) {
    EmitAllButMarkerPrefix({kThinkClose, kEnd}, &out->reasoning);
    return false;
  }
  const size_t at = std::min(close, end);
  out->reasoning.append(buffer_, 0, at);
  if (at == end) {
    state_ = State::kDone;
    return true;
  }
  buffer_.erase(0, at + kThinkClose.size());
  state_ = State::kBody;
  return true;
}

bool XtmlOutputStreamParser::StepBody(XtmlOutput* out) {
  static const std::vector<std::string_view> kMarkers = {kResponseOpen, kResponseClose,
                                                         kMessageClose, kToolsOpen, kEnd};
  size_t at = npos;
  std::string_view marker;
  for (std::string_view m : kMarkers) {
    const size_t found = buffer_.find(m);
    if (found < at) {
      at = found;
      marker = m;
    }
  }
  if (at == npos) {
    const size_t before = out->content.size();
    EmitAllButMarkerPrefix(kMarkers, &out->content);
    body_text_seen_ = body_text_seen_ || out->content.size() > before;
    return false;
  }
  out->content.append(buffer_, 0, at);
  body_text_seen_ = body_text_seen_ || at > 0;
  buffer_.erase(0, at + marker.size());
  if (marker == kResponseOpen) {
    if (!body_text_seen_) explicit_response_ = true;
  } else if (marker == kResponseClose) {
    if (explicit_response_) state_ = State::kAfterResponse;
  } else if (marker == kToolsOpen) {
    EnterTools();
  } else if (marker == kEnd) {
    state_ = State::kDone;
  }
  return true;
}

bool XtmlOutputStreamParser::StepAfterResponse() {
  if (!options_.tools) {
    state_ = State::kDone;
    return true;
  }
  const size_t tools = buffer_.find(kToolsOpen);
  const size_t end = buffer_.find(kEnd);
  if (end < tools) {
    state_ = State::kDone;
    return true;
  }
  if (tools != npos) {
    buffer_.erase(0, tools + kToolsOpen.size());
    EnterTools();
    return true;
  }
  if (buffer_.size() > kToolsTail) buffer_.erase(0, buffer_.size() - kToolsTail);
  return false;
}

void XtmlOutputStreamParser::EnterTools() {
  state_ = options_.tools ? State::kTools : State::kDone;
  call_open_ = npos;
  call_sep_ = npos;
  scanned_ = 0;
}

bool XtmlOutputStreamParser::StepTools(XtmlOutput* out) {
  // Searches resume a marker's length before what earlier ones covered: nothing starts earlier.
  const size_t resume = scanned_ > kToolsTail ? scanned_ - kToolsTail : 0;
  // The section ends at the first <|close|>tools<|sep|> (or <|end_of_msg|>).
  const size_t end = std::min(buffer_.find(kToolsClose, resume), buffer_.find(kEnd, resume));
  auto wait_or_finish = [&]() {
    if (end != npos) {  // the section ended inside an incomplete call (or had none): dropped
      state_ = State::kDone;
      return true;
    }
    scanned_ = buffer_.size();
    return false;
  };
  if (call_open_ == npos) {
    bool need_more = false;
    call_open_ = FindOpenWithSpace(buffer_, kCallOpen, resume, end, &need_more);
    if (call_open_ == npos) {
      if (end == npos && !need_more && buffer_.size() > kToolsTail) {
        buffer_.erase(0, buffer_.size() - kToolsTail);  // no call starts in what goes
      }
      return wait_or_finish();
    }
  }
  if (end < call_open_) return wait_or_finish();
  const size_t head_start = call_open_ + kCallOpen.size();
  if (call_sep_ == npos) {
    const size_t sep = buffer_.find(xtml::kSep, std::max(head_start, resume));
    if (sep == npos || (end != npos && sep > end)) return wait_or_finish();
    call_sep_ = sep;
  }
  const size_t body_start = call_sep_ + xtml::kSep.size();
  const size_t close = buffer_.find(kCallClose, std::max(body_start, resume));
  if (close == npos || (end != npos && close > end)) return wait_or_finish();
  EmitCall(std::string_view(buffer_).substr(head_start, call_sep_ - head_start),
           std::string_view(buffer_).substr(body_start, close - body_start), out);
  buffer_.erase(0, close + kCallClose.size());
  call_open_ = npos;
  call_sep_ = npos;
  scanned_ = 0;
  return true;
}

void XtmlOutputStreamParser::EmitCall(std::string_view attributes, std::string_view body,
                                      XtmlOutput* out) {
  const absl::flat_hash_map<std::string, std::string> head = ParseAttributes(attributes);
  const auto tool = head.find("tool");
  if (tool == head.end() || tool->second.empty()) return;  // a call without a name: dropped
  ToolCall call;
  call.id = options_.new_call_id ? options_.new_call_id() : RandomToolCallId();
  call.name = tool->second;
  call.arguments = ArgumentsJson(body);
  out->tool_calls.push_back(std::move(call));
  ++num_tool_calls_;
}

}  // namespace strata::engine
