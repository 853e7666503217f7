#include "engine/tokenizer/python_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "core/json_limits.h"

namespace strata::engine {
namespace {

// The one-letter backslash escapes of both JSON and Python string literals: (character, letter).
constexpr std::pair<char, char> kSimpleEscapes[] = {
    {'"', '"'}, {'\\', '\\'}, {'\b', 'b'}, {'\f', 'f'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'},
};

}  // namespace

std::string PythonFloatRepr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form: "-d.ddde+XX".
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(end - buf));
  const bool negative = sci.front() == '-';
  if (negative) sci.remove_prefix(1);
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (const char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + (sci[e_pos + 1] == '+' ? 2 : 1), sci.data() + sci.size(),
                  exponent);
  const int decpt = exponent + 1;  // x = 0.DIGITS * 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out.append("0.").append(static_cast<size_t>(-decpt), '0').append(digits);
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out.append(digits).append(static_cast<size_t>(decpt) - digits.size(), '0').append(".0");
    } else {
      out.append(digits, 0, static_cast<size_t>(decpt))
          .append(".")
          .append(digits, static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out.append(".").append(digits, 1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

std::string PythonJsonFloat(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return PythonFloatRepr(x);
}

void AppendJsonStringByte(char c, bool ensure_ascii, std::string* out) {
  const auto byte = static_cast<unsigned char>(c);
  const bool control = byte < 0x20 || (ensure_ascii && byte == 0x7F);
  if (!control && c != '"' && c != '\\') {
    out->push_back(c);
    return;
  }
  for (const auto& [character, letter] : kSimpleEscapes) {
    if (c == character) {
      out->push_back('\\');
      out->push_back(letter);
      return;
    }
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out->append("\\u00");
  out->push_back(kHex[byte >> 4]);
  out->push_back(kHex[byte & 0xF]);
}

std::optional<char> SimpleEscapeChar(char letter) {
  for (const auto& [character, escape_letter] : kSimpleEscapes) {
    if (letter == escape_letter) return character;
  }
  return std::nullopt;
}

std::optional<uint32_t> ParseHexDigits(std::string_view digits) {
  if (digits.empty() || digits.size() > 8) return std::nullopt;
  uint32_t value = 0;
  for (const char c : digits) {
    uint32_t digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    value = value << 4 | digit;
  }
  return value;
}

nlohmann::ordered_json SortKeysDeep(const nlohmann::ordered_json& v) {
  using Json = nlohmann::ordered_json;
  if (v.is_object()) {
    std::vector<std::string> keys;
    for (const auto& [k, item] : v.items()) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    Json out = Json::object();
    for (const std::string& k : keys) AppendNewMember(&out, k, SortKeysDeep(v.at(k)));  // unique
    return out;
  }
  if (v.is_array()) {
    Json out = Json::array();
    for (const Json& item : v) out.push_back(SortKeysDeep(item));
    return out;
  }
  return v;
}

}  // namespace strata::engine
