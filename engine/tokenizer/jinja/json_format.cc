#include "engine/tokenizer/jinja/json_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/internal/absl_view.h"
#include "engine/tokenizer/python_json.h"
#include "engine/tokenizer/utf8.h"

namespace strata::engine::jinja {
namespace {

constexpr int kMaxJsonDepth = 512;

void AppendEscapedString(std::string_view s, bool ensure_ascii, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  auto append_u = [&](uint32_t unit) {
    out->append("\\u");
    for (int shift = 12; shift >= 0; shift -= 4) out->push_back(kHex[(unit >> shift) & 0xF]);
  };
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      AppendJsonStringByte(s[i], ensure_ascii, out);
      ++i;
      continue;
    }
    const Utf8Step step = DecodeUtf8Step(s.substr(i));
    const char32_t cp = step.status == Utf8Status::kChar ? step.code_point : kReplacementChar;
    if (!ensure_ascii) {
      if (step.status == Utf8Status::kChar) {
        out->append(s.substr(i, step.length));
      } else {
        AppendUtf8(kReplacementChar, out);
      }
    } else if (cp < 0x10000) {
      append_u(cp);
    } else {
      append_u(0xD800 + ((cp - 0x10000) >> 10));
      append_u(0xDC00 + ((cp - 0x10000) & 0x3FF));
    }
    i += step.length;
  }
  out->push_back('"');
}

absl::Status AppendJson(const Value& v, const JsonOptions& o, int depth, std::string* out);

// Writes the members of an array or object with the indent/separator rules of json.dumps.
template <typename Items, typename WriteItem>
absl::Status AppendContainer(const Items& items, char open, char close, const JsonOptions& o,
                             int depth, WriteItem write_item, std::string* out) {
  out->push_back(open);
  if (items.empty()) {
    out->push_back(close);
    return absl::OkStatus();
  }
  const std::string item_sep = o.item_separator.value_or(o.indent.has_value() ? "," : ", ");
  std::string newline_inner;
  if (o.indent.has_value()) {
    newline_inner.push_back('\n');
    newline_inner.append(static_cast<size_t>(*o.indent) * (depth + 1), ' ');
  }
  bool first = true;
  for (const auto& item : items) {
    if (!first) out->append(item_sep);
    first = false;
    out->append(newline_inner);
    if (absl::Status s = write_item(item); !s.ok()) return s;
  }
  if (o.indent.has_value()) {
    out->push_back('\n');
    out->append(static_cast<size_t>(*o.indent) * depth, ' ');
  }
  out->push_back(close);
  return absl::OkStatus();
}

absl::Status AppendObject(const ObjectData& data, const JsonOptions& o, int depth,
                          std::string* out) {
  std::vector<const std::pair<std::string, Value>*> items;
  items.reserve(data.items.size());
  for (const auto& item : data.items) items.push_back(&item);
  if (o.sort_keys) {
    std::stable_sort(items.begin(), items.end(),
                     [](auto* a, auto* b) { return a->first < b->first; });
  }
  const std::string key_sep = o.key_separator.value_or(": ");
  return AppendContainer(
      items, '{', '}', o, depth,
      [&](const std::pair<std::string, Value>* item) {
        AppendEscapedString(item->first, o.ensure_ascii, out);
        out->append(key_sep);
        return AppendJson(item->second, o, depth + 1, out);
      },
      out);
}

absl::Status AppendJson(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  if (depth > kMaxJsonDepth) return absl::InvalidArgumentError("tojson: value nested too deeply");
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined:
    case K::kNone:
      out->append("null");
      return absl::OkStatus();
    case K::kBool:
      out->append(v.bool_value() ? "true" : "false");
      return absl::OkStatus();
    case K::kInt:
      internal::Append(out, v.int_value());
      return absl::OkStatus();
    case K::kFloat:
      out->append(PythonJsonFloat(v.float_value()));
      return absl::OkStatus();
    case K::kString:
      AppendEscapedString(v.str(), o.ensure_ascii, out);
      return absl::OkStatus();
    case K::kArray:
      return AppendContainer(
          v.array(), '[', ']', o, depth,
          [&](const Value& item) { return AppendJson(item, o, depth + 1, out); }, out);
    case K::kObject:
      return AppendObject(v.object(), o, depth, out);
    case K::kNamespace:
      return AppendObject(v.ns(), o, depth, out);
    case K::kCallable:
      return absl::InvalidArgumentError(
          internal::Cat("tojson: cannot serialise callable '", v.callable().name, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options) {
  std::string out;
  if (absl::Status s = AppendJson(value, options, 0, &out); !s.ok()) return s;
  return out;
}

std::string ToDisplayString(const Value& value) {
  using K = Value::Kind;
  switch (value.kind()) {
    case K::kUndefined:
    case K::kNone:
      return "";
    case K::kBool:
      return value.bool_value() ? "true" : "false";
    case K::kInt:
      return internal::Cat(value.int_value());
    case K::kFloat:
      return PythonFloatRepr(value.float_value());
    case K::kString:
      return value.str();
    case K::kCallable:
      return internal::Cat("<function ", value.callable().name, ">");
    default: {
      absl::StatusOr<std::string> json = ToJson(value);
      return json.ok() ? *json : std::string();
    }
  }
}

}  // namespace strata::engine::jinja

namespace strata::engine::jinja {

std::string ToConcatString(const Value& value) {
  using K = Value::Kind;
  switch (value.kind()) {
    case K::kFloat: {
      const double f = value.float_value();
      if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 1e21) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.0f", f);
        return buf;
      }
      return PythonFloatRepr(f);
    }
    case K::kArray: {
      std::string out;
      for (size_t i = 0; i < value.array().size(); ++i) {
        if (i > 0) out.push_back(',');
        const Value& item = value.array()[i];
        out += item.is_none() ? "null" : item.is_undefined() ? "undefined" : ToDisplayString(item);
      }
      return out;
    }
    case K::kObject:
      return "[object Map]";
    default:
      return ToDisplayString(value);
  }
}

}  // namespace strata::engine::jinja
