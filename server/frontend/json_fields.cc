#include "server/frontend/json_fields.h"

#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/json_limits.h"
#include "server/frontend/api_error.h"
#include "server/frontend/internal/strings.h"

namespace strata::frontend {

std::string FormatNumber(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.10g", value);
  return buf;
}

std::string Preview(const nlohmann::ordered_json& value) {
  using Json = nlohmann::ordered_json;
  constexpr size_t kMaxChars = 60;
  std::string text;
  // dump()'s compact form, written by hand with a stack of open containers (dump recurses),
  // and only until the preview is full.
  std::vector<std::pair<const Json*, Json::const_iterator>> open;
  auto start = [&](const Json& v) {
    if (v.is_structured()) {
      text += v.is_object() ? '{' : '[';
      open.emplace_back(&v, v.cbegin());
    } else {
      text += v.dump(-1, ' ', false, Json::error_handler_t::replace);
    }
  };
  start(value);
  while (!open.empty() && text.size() <= kMaxChars) {
    auto& [container, next] = open.back();
    if (next == container->cend()) {
      text += container->is_object() ? '}' : ']';
      open.pop_back();
      continue;
    }
    if (next != container->cbegin()) text += ',';
    if (container->is_object()) {
      text += Json(next.key()).dump(-1, ' ', false, Json::error_handler_t::replace);
      text += ':';
    }
    const Json& child = *next++;
    start(child);  // may grow `open`: container and next are not used after
  }
  if (text.size() > kMaxChars) {
    // Cut between characters: the message goes into a JSON error body, which must be UTF-8.
    size_t cut = kMaxChars - 3;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}

std::string StringOr(const nlohmann::ordered_json& object, std::string_view key,
                     std::string_view fallback) {
  if (!object.is_object()) return std::string(fallback);
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return std::string(fallback);
  return it->get<std::string>();
}

absl::StatusOr<nlohmann::ordered_json> ParseJsonField(std::string_view text,
                                                      std::string_view param) {
  absl::StatusOr<nlohmann::ordered_json> parsed = ParseBoundedJson(text);
  if (parsed.ok()) return parsed;
  const absl::string_view why = parsed.status().message();
  if (IsJsonLimitError(parsed.status())) {
    return InvalidField(param, absl::StrCat("'", internal::Av(param), "': ", why),
                        "json_limit_exceeded");
  }
  return InvalidField(param, absl::StrCat("'", internal::Av(param), "' is not valid JSON: ", why));
}

const nlohmann::ordered_json* FieldReader::Find(std::string_view key) const {
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<double>> FieldReader::Number(std::string_view key, double min,
                                                          double max, bool min_exclusive) const {
  const nlohmann::ordered_json* v = Find(key);
  if (!v) return std::nullopt;
  const std::string path = Path(key);
  const std::string range =
      absl::StrCat(min_exclusive ? "(" : "[", FormatNumber(min), ", ", FormatNumber(max), "]");
  if (!v->is_number()) {
    return InvalidField(
        path, absl::StrCat("'", path, "' must be a number in ", range, "; got ", Preview(*v)),
        "invalid_type");
  }
  const double x = v->get<double>();
  const bool low = min_exclusive ? !(x > min) : !(x >= min);
  if (low || !(x <= max)) {
    return InvalidField(path,
                        absl::StrCat("'", path, "' must be in ", range, "; got ", FormatNumber(x)));
  }
  return x;
}

absl::StatusOr<std::optional<int64_t>> FieldReader::Integer(std::string_view key, int64_t min,
                                                            int64_t max) const {
  const nlohmann::ordered_json* v = Find(key);
  if (!v) return std::nullopt;
  const std::string path = Path(key);
  const std::string range = absl::StrCat("[", min, ", ", max, "]");
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      x = INT64_MAX;
    } else {
      x = v->get<int64_t>();
    }
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             std::trunc(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9.0e18) {
    x = static_cast<int64_t>(v->get<double>());  // 5.0 is accepted as 5, as pydantic does
  } else {
    return InvalidField(
        path, absl::StrCat("'", path, "' must be an integer in ", range, "; got ", Preview(*v)),
        "invalid_type");
  }
  if (x < min || x > max) {
    return InvalidField(path, absl::StrCat("'", path, "' must be in ", range, "; got ", x));
  }
  return x;
}

absl::StatusOr<std::optional<bool>> FieldReader::Bool(std::string_view key) const {
  const nlohmann::ordered_json* v = Find(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    return InvalidField(Path(key),
                        absl::StrCat("'", Path(key), "' must be a boolean; got ", Preview(*v)),
                        "invalid_type");
  }
  return v->get<bool>();
}

absl::StatusOr<std::optional<std::string>> FieldReader::String(std::string_view key) const {
  const nlohmann::ordered_json* v = Find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    return InvalidField(Path(key),
                        absl::StrCat("'", Path(key), "' must be a string; got ", Preview(*v)),
                        "invalid_type");
  }
  return v->get<std::string>();
}

}  // namespace strata::frontend
