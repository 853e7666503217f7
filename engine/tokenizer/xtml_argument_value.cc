// xtml_argument_value.h: Python's json.loads → json.dumps(ensure_ascii=False) for argument bodies.
#include "engine/tokenizer/xtml_argument_value.h"

#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/python_json.h"
#include "engine/tokenizer/utf8.h"

namespace strata::engine::xtml {
namespace {

// A parsed JSON value kept as Python holds it: scalars already written the way json.dumps
// writes them, containers as their members in order.
struct Value {
  enum class Kind { kScalar, kArray, kObject };
  Kind kind = Kind::kScalar;
  std::string scalar;                                // kScalar: its JSON text
  std::vector<Value> items;                          // kArray
  std::vector<std::pair<std::string, Value>> pairs;  // kObject: decoded key, value
};

// Python's json scanner (strict mode) over `text`.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::optional<Value> ParseDocument() {
    SkipSpace();
    std::optional<Value> value = ParseValue(0);
    if (!value) return std::nullopt;
    SkipSpace();
    if (pos_ != text_.size()) return std::nullopt;  // "Extra data"
    return value;
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  static Value Scalar(std::string text) {
    Value v;
    v.scalar = std::move(text);
    return v;
  }

  std::optional<Value> ParseValue(int depth) {
    if (depth > kMaxArgumentDepth || pos_ >= text_.size()) return std::nullopt;
    const char c = text_[pos_];
    if (c == '"') {
      std::optional<std::string> s = ParseString();
      if (!s) return std::nullopt;
      return Scalar(PythonJsonString(*s));
    }
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (Consume("null")) return Scalar("null");
    if (Consume("true")) return Scalar("true");
    if (Consume("false")) return Scalar("false");
    if (Consume("NaN")) return Scalar("NaN");
    if (Consume("Infinity")) return Scalar("Infinity");
    if (Consume("-Infinity")) return Scalar("-Infinity");
    return ParseNumber();
  }

  std::optional<Value> ParseObject(int depth) {
    ++pos_;  // '{'
    Value v;
    v.kind = Value::Kind::kObject;
    SkipSpace();
    if (Consume("}")) return v;
    absl::flat_hash_map<std::string, size_t> index;  // key → its place in v.pairs
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] != '"') return std::nullopt;
      std::optional<std::string> key = ParseString();
      if (!key) return std::nullopt;
      SkipSpace();
      if (!Consume(":")) return std::nullopt;
      SkipSpace();
      std::optional<Value> member = ParseValue(depth + 1);
      if (!member) return std::nullopt;
      // Python's dict: a repeated key keeps its first place and takes the last value.
      const auto [it, inserted] = index.try_emplace(*key, v.pairs.size());
      if (inserted) {
        v.pairs.emplace_back(std::move(*key), std::move(*member));
      } else {
        v.pairs[it->second].second = std::move(*member);
      }
      SkipSpace();
      if (Consume("}")) return v;
      if (!Consume(",")) return std::nullopt;
      SkipSpace();
    }
  }

  std::optional<Value> ParseArray(int depth) {
    ++pos_;  // '['
    Value v;
    v.kind = Value::Kind::kArray;
    SkipSpace();
    if (Consume("]")) return v;
    while (true) {
      std::optional<Value> item = ParseValue(depth + 1);
      if (!item) return std::nullopt;
      v.items.push_back(std::move(*item));
      SkipSpace();
      if (Consume("]")) return v;
      if (!Consume(",")) return std::nullopt;
      SkipSpace();
    }
  }

  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }

  // -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)? — an int unless it has a fraction or an exponent.
  std::optional<Value> ParseNumber() {
    const size_t start = pos_;
    size_t p = pos_;
    if (p < text_.size() && text_[p] == '-') ++p;
    if (p >= text_.size() || !IsDigit(text_[p])) return std::nullopt;
    if (text_[p] == '0') {
      ++p;
    } else {
      while (p < text_.size() && IsDigit(text_[p])) ++p;
    }
    bool is_float = false;
    if (p + 1 < text_.size() && text_[p] == '.' && IsDigit(text_[p + 1])) {
      is_float = true;
      p += 2;
      while (p < text_.size() && IsDigit(text_[p])) ++p;
    }
    if (p < text_.size() && (text_[p] == 'e' || text_[p] == 'E')) {
      size_t q = p + 1;
      if (q < text_.size() && (text_[q] == '+' || text_[q] == '-')) ++q;
      if (q < text_.size() && IsDigit(text_[q])) {
        is_float = true;
        p = q;
        while (p < text_.size() && IsDigit(text_[p])) ++p;
      }
    }
    pos_ = p;
    const std::string literal(text_.substr(start, p - start));
    if (!is_float) return Scalar(literal == "-0" ? "0" : literal);
    // strtod rounds correctly and overflows to ±inf, underflows to ±0, as Python's float().
    const double x = std::strtod(literal.c_str(), nullptr);
    return Scalar(PythonJsonFloat(x));
  }

  std::optional<uint32_t> Hex4(size_t at) const {
    if (at + 4 > text_.size()) return std::nullopt;
    return ParseHexDigits(text_.substr(at, 4));
  }

  std::optional<std::string> ParseString() {
    ++pos_;  // '"'
    std::string out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) return std::nullopt;  // strict
      if (c != '\\') {
        out.push_back(c);
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= text_.size()) return std::nullopt;
      const char e = text_[pos_ + 1];
      pos_ += 2;
      if (const std::optional<char> escaped = SimpleEscapeChar(e)) {
        out.push_back(*escaped);
        continue;
      }
      switch (e) {
        case '/':
          out.push_back('/');
          break;
        case 'u': {
          std::optional<uint32_t> unit = Hex4(pos_);
          if (!unit) return std::nullopt;
          pos_ += 4;
          uint32_t code_point = *unit;
          if (code_point >= 0xD800 && code_point <= 0xDBFF && pos_ + 1 < text_.size() &&
              text_[pos_] == '\\' && text_[pos_ + 1] == 'u') {
            std::optional<uint32_t> low = Hex4(pos_ + 2);
            if (low && *low >= 0xDC00 && *low <= 0xDFFF) {
              code_point = 0x10000 + ((code_point - 0xD800) << 10) + (*low - 0xDC00);
              pos_ += 6;
            }
          }
          // A lone surrogate (which Python's json keeps) gets its three-byte pattern, which
          // PythonJsonString turns back into its \u escape.
          AppendUtf8(code_point, &out);
          break;
        }
        default:
          return std::nullopt;
      }
    }
    return std::nullopt;  // unterminated
  }

  std::string_view text_;
  size_t pos_ = 0;
};

void Write(const Value& v, std::string* out) {
  switch (v.kind) {
    case Value::Kind::kScalar:
      *out += v.scalar;
      return;
    case Value::Kind::kArray:
      out->push_back('[');
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i > 0) *out += ", ";
        Write(v.items[i], out);
      }
      out->push_back(']');
      return;
    case Value::Kind::kObject:
      out->push_back('{');
      for (size_t i = 0; i < v.pairs.size(); ++i) {
        if (i > 0) *out += ", ";
        *out += PythonJsonString(v.pairs[i].first);
        *out += ": ";
        Write(v.pairs[i].second, out);
      }
      out->push_back('}');
      return;
  }
}

}  // namespace

std::string PythonJsonString(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0xED && i + 2 < text.size() &&
        (static_cast<unsigned char>(text[i + 1]) & 0xE0) == 0xA0) {
      // A lone surrogate from a \u escape (AppendUtf8): back to its escape.
      const uint32_t unit = 0xD000 | ((static_cast<unsigned char>(text[i + 1]) & 0x3F) << 6) |
                            (static_cast<unsigned char>(text[i + 2]) & 0x3F);
      absl::StrAppendFormat(&out, "\\u%04x", unit);
      i += 2;
    } else {
      AppendJsonStringByte(text[i], /*ensure_ascii=*/false, &out);
    }
  }
  out.push_back('"');
  return out;
}

std::optional<std::string> PythonJsonRoundTrip(std::string_view body) {
  std::optional<Value> value = Parser(body).ParseDocument();
  if (!value) return std::nullopt;
  std::string out;
  Write(*value, &out);
  return out;
}

std::string ArgumentValueJson(std::string_view body, std::optional<std::string_view> type) {
  if (!type || *type == "string") return PythonJsonString(body);
  std::optional<std::string> json = PythonJsonRoundTrip(body);
  return json ? *std::move(json) : PythonJsonString(body);
}

std::string ArgumentsObjectJson(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::vector<std::pair<std::string, std::string>> merged;
  absl::flat_hash_map<std::string, size_t> index;  // key → its place in merged
  for (const auto& [key, value] : entries) {
    const auto [it, inserted] = index.try_emplace(key, merged.size());
    if (inserted) {
      merged.emplace_back(key, value);
    } else {
      merged[it->second].second = value;
    }
  }
  std::string out = "{";
  for (size_t i = 0; i < merged.size(); ++i) {
    if (i > 0) out += ", ";
    out += PythonJsonString(merged[i].first) + ": " + merged[i].second;
  }
  out += "}";
  return out;
}

}  // namespace strata::engine::xtml
