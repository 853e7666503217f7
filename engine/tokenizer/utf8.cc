#include "engine/tokenizer/utf8.h"

namespace strata::engine {
namespace {

// Range of the second byte allowed after a lead byte (Unicode Table 3-7).
struct LeadInfo {
  uint8_t length;      // total sequence length, 0 for an invalid lead
  uint8_t second_low;  // allowed range of the second byte
  uint8_t second_high;
};

LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

Utf8Step DecodeUtf8Step(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  const LeadInfo lead = Lead(p[0]);
  if (lead.length == 1) return {Utf8Status::kChar, 1, p[0]};
  if (lead.length == 0) return {Utf8Status::kInvalid, 1, 0};
  char32_t cp = p[0] & (0xFF >> (lead.length + 1));
  for (size_t i = 1; i < lead.length; ++i) {
    if (i >= n) return {Utf8Status::kIncomplete, n, 0};
    const uint8_t low = i == 1 ? lead.second_low : 0x80;
    const uint8_t high = i == 1 ? lead.second_high : 0xBF;
    if (p[i] < low || p[i] > high) return {Utf8Status::kInvalid, i, 0};
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  return {Utf8Status::kChar, lead.length, cp};
}

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= bytes.size()) {
      uint64_t word;
      __builtin_memcpy(&word, bytes.data() + i, 8);
      if (word & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= bytes.size()) break;
    const Utf8Step step = DecodeUtf8Step(bytes.substr(i));
    if (step.status != Utf8Status::kChar) return false;
    i += step.length;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const Utf8Step step = DecodeUtf8Step(bytes.substr(i));
    if (step.status == Utf8Status::kChar) {
      out.append(bytes.substr(i, step.length));
    } else {
      AppendUtf8(kReplacementChar, &out);
    }
    i += step.length;
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t CountCodePoints(std::string_view text) {
  size_t count = 0;
  for (size_t i = 0; i < text.size(); ++count) {
    i += DecodeUtf8Step(text.substr(i)).length;
  }
  return count;
}

bool IsPythonSpace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace strata::engine
