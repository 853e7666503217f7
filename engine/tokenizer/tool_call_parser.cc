#include "engine/tokenizer/tool_call_parser.h"

#include <algorithm>
#include <array>

#include "engine/tokenizer/utf8.h"

namespace strata::engine {
namespace {

constexpr std::array<std::string_view, 2> kSectionBegin = {"<|tool_calls_section_begin|>",
                                                           "<|tool_call_section_begin|>"};
constexpr std::string_view kSectionEnd = "<|tool_calls_section_end|>";
constexpr std::string_view kCallBegin = "<|tool_call_begin|>";
constexpr std::string_view kArgumentBegin = "<|tool_call_argument_begin|>";
constexpr std::string_view kCallEnd = "<|tool_call_end|>";

// Position and length of the first section-begin marker, or npos.
std::pair<size_t, size_t> FindSectionBegin(std::string_view text) {
  std::pair<size_t, size_t> best = {std::string_view::npos, 0};
  for (std::string_view marker : kSectionBegin) {
    const size_t pos = text.find(marker);
    if (pos < best.first) best = {pos, marker.size()};
  }
  return best;
}

// Length of the longest suffix of `text` that is a proper prefix of one of `markers`.
size_t PartialMarkerSuffix(std::string_view text, std::initializer_list<std::string_view> markers) {
  size_t best = 0;
  for (std::string_view m : markers) {
    for (size_t len = std::min(text.size(), m.size() - 1); len > best; --len) {
      if (text.substr(text.size() - len) == m.substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

// Byte length of leading / trailing Python whitespace.
size_t LeadingSpace(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Step step = DecodeUtf8Step(s.substr(i));
    if (step.status != Utf8Status::kChar || !IsPythonSpace(step.code_point)) break;
    i += step.length;
  }
  return i;
}

size_t TrailingSpace(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    const Utf8Step step = DecodeUtf8Step(s.substr(start, end - start));
    if (step.status != Utf8Status::kChar || step.length != end - start ||
        !IsPythonSpace(step.code_point)) {
      break;
    }
    end = start;
  }
  return s.size() - end;
}

// Length of a truncated UTF-8 character at the end of `s` (0 if none).
size_t IncompleteTail(std::string_view s) {
  for (size_t len = 1; len <= 3 && len <= s.size(); ++len) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - len]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    return c >= 0xC0 && DecodeUtf8Step(s.substr(s.size() - len)).status == Utf8Status::kIncomplete
               ? len
               : 0;
  }
  return 0;
}

std::string_view Trim(std::string_view s) {
  s.remove_prefix(LeadingSpace(s));
  s.remove_suffix(TrailingSpace(s));
  return s;
}

ToolCall MakeCall(std::string_view header) {
  ToolCall call;
  call.id = std::string(Trim(header));
  std::string_view name = call.id;
  name = name.substr(0, name.rfind(':'));
  const size_t dot = name.rfind('.');
  if (dot != std::string_view::npos) name.remove_prefix(dot + 1);
  call.name = std::string(name);
  return call;
}

}  // namespace

ParsedToolCalls ParseKimiToolCalls(std::string_view text) {
  ParsedToolCalls out;
  const auto [begin, begin_len] = FindSectionBegin(text);
  if (begin == std::string_view::npos) {
    out.content = std::string(text);
    return out;
  }
  out.content = std::string(text.substr(0, begin));
  std::string_view section = text.substr(begin + begin_len);
  section = section.substr(0, section.find(kSectionEnd));
  while (true) {
    const size_t call = section.find(kCallBegin);
    if (call == std::string_view::npos) break;
    section.remove_prefix(call + kCallBegin.size());
    const size_t arg = section.find(kArgumentBegin);
    const size_t end = section.find(kCallEnd);
    if (arg == std::string_view::npos || end == std::string_view::npos || end < arg) break;
    ToolCall tc = MakeCall(section.substr(0, arg));
    tc.arguments = std::string(
        Trim(section.substr(arg + kArgumentBegin.size(), end - arg - kArgumentBegin.size())));
    out.tool_calls.push_back(std::move(tc));
    section.remove_prefix(end + kCallEnd.size());
  }
  return out;
}

ToolCallStreamDelta KimiToolCallStreamParser::Add(std::string_view text) {
  ToolCallStreamDelta out;
  buffer_.append(text);
  Step(/*end_of_stream=*/false, &out);
  return out;
}

ToolCallStreamDelta KimiToolCallStreamParser::Finish() {
  ToolCallStreamDelta out;
  Step(/*end_of_stream=*/true, &out);
  return out;
}

void KimiToolCallStreamParser::Step(bool end_of_stream, ToolCallStreamDelta* out) {
  while (true) {
    std::string_view buf = buffer_;
    switch (state_) {
      case State::kContent: {
        const auto [pos, len] = FindSectionBegin(buf);
        if (pos == std::string_view::npos) {
          const size_t hold =
              end_of_stream ? 0 : PartialMarkerSuffix(buf, {kSectionBegin[0], kSectionBegin[1]});
          out->content.append(buf.substr(0, buf.size() - hold));
          buffer_.erase(0, buf.size() - hold);
          return;
        }
        out->content.append(buf.substr(0, pos));
        buffer_.erase(0, pos + len);
        state_ = State::kSection;
        break;
      }
      case State::kSection: {
        const size_t call = buf.find(kCallBegin);
        const size_t end = buf.find(kSectionEnd);
        if (end != std::string_view::npos && end < call) {
          state_ = State::kDone;
          break;
        }
        if (call == std::string_view::npos) {
          const size_t hold = PartialMarkerSuffix(buf, {kCallBegin, kSectionEnd});
          buffer_.erase(0, buf.size() - hold);
          return;
        }
        buffer_.erase(0, call + kCallBegin.size());
        state_ = State::kHeader;
        break;
      }
      case State::kHeader: {
        const size_t arg = buf.find(kArgumentBegin);
        if (arg == std::string_view::npos) return;
        ToolCall call = MakeCall(buf.substr(0, arg));
        ToolCallDelta delta;
        delta.index = ++index_;
        delta.id = std::move(call.id);
        delta.name = std::move(call.name);
        out->tool_calls.push_back(std::move(delta));
        buffer_.erase(0, arg + kArgumentBegin.size());
        arguments_started_ = false;
        pending_space_.clear();
        state_ = State::kArguments;
        break;
      }
      case State::kArguments: {
        const size_t end = buf.find(kCallEnd);
        const bool complete = end != std::string_view::npos;
        // Without the end marker, keep back what may be its start or a cut-off character.
        const size_t segment_len =
            complete
                ? end
                : buf.size() - std::max(PartialMarkerSuffix(buf, {kCallEnd}), IncompleteTail(buf));
        std::string_view segment = buf.substr(0, segment_len);
        if (!arguments_started_) segment.remove_prefix(LeadingSpace(segment));
        // Whitespace at the end may turn out to be trailing (trimmed): hold it back.
        const std::string_view body = segment.substr(0, segment.size() - TrailingSpace(segment));
        if (!body.empty()) {
          out->tool_calls.push_back(
              {index_, std::nullopt, std::nullopt, pending_space_ + std::string(body)});
          pending_space_ = std::string(segment.substr(body.size()));
          arguments_started_ = true;
        } else if (arguments_started_) {
          pending_space_.append(segment);
        }
        if (!complete) {
          buffer_.erase(0, segment_len);
          return;
        }
        buffer_.erase(0, end + kCallEnd.size());
        pending_space_.clear();
        state_ = State::kSection;
        break;
      }
      case State::kDone:
        buffer_.clear();
        return;
    }
  }
}

}  // namespace strata::engine
