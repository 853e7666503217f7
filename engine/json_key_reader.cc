#include "engine/json_key_reader.h"

#include <cmath>
#include <limits>
#include <utility>

namespace strata::engine {

using json = nlohmann::json;

std::string DescribeJson(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return value.get<bool>() ? "true" : "false";
    case json::value_t::number_integer:
      return CatAny("integer ", value.get<int64_t>());
    case json::value_t::number_unsigned:
      return CatAny("integer ", value.get<uint64_t>());
    case json::value_t::number_float:
      return CatAny("number ", value.get<double>());
    case json::value_t::string: {
      const std::string& text = value.get_ref<const std::string&>();
      if (text.size() <= kMaxStringInMessage) return CatAny("string \"", text, "\"");
      return CatAny("string \"", text.substr(0, kMaxStringInMessage), "...\"");
    }
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "an unsupported JSON value";
  }
}

const json* KeyReader::Find(std::string_view key) const {
  auto it = object_.find(std::string(key));
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status KeyReader::Error(std::string_view key, std::string_view message) const {
  return absl::InvalidArgumentError(CatAny(source_, ": ", prefix_, key, " ", message));
}

absl::Status KeyReader::TypeError(std::string_view key, std::string_view expected,
                                  const json& found) const {
  return Error(key, CatAny("must be ", expected, ", found ", DescribeJson(found)));
}

absl::Status KeyReader::Missing(std::string_view key, bool required) const {
  if (!required) return absl::OkStatus();
  return absl::InvalidArgumentError(CatAny(source_, ": missing required key ", prefix_, key));
}

absl::Status KeyReader::Int64(std::string_view key, int64_t* out, bool required) const {
  const json* value = Find(key);
  if (value == nullptr) return Missing(key, required);
  return ToInt64(*value, key, out);
}

absl::Status KeyReader::Int(std::string_view key, int* out, bool required) const {
  int64_t wide = *out;
  if (absl::Status status = Int64(key, &wide, required); !status.ok()) return status;
  if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max()) {
    return Error(key, CatAny("must fit in a 32-bit int, found ", wide));
  }
  *out = static_cast<int>(wide);
  return absl::OkStatus();
}

absl::Status KeyReader::Float(std::string_view key, float* out, bool required) const {
  const json* value = Find(key);
  if (value == nullptr) return Missing(key, required);
  return ToFloat(*value, key, out);
}

absl::Status KeyReader::Bool(std::string_view key, bool* out, bool required) const {
  const json* value = Find(key);
  if (value == nullptr) return Missing(key, required);
  if (!value->is_boolean()) return TypeError(key, "true or false", *value);
  *out = value->get<bool>();
  return absl::OkStatus();
}

absl::Status KeyReader::String(std::string_view key, std::string* out, bool required) const {
  const json* value = Find(key);
  if (value == nullptr) return Missing(key, required);
  if (!value->is_string()) return TypeError(key, "a string", *value);
  *out = value->get<std::string>();
  return absl::OkStatus();
}

absl::Status KeyReader::IntList(std::string_view key, std::vector<int>* out, bool required) const {
  const json* value = Find(key);
  if (value == nullptr) return Missing(key, required);
  if (!value->is_array()) return TypeError(key, "a list of integers", *value);
  out->clear();
  for (size_t i = 0; i < value->size(); ++i) {
    const std::string element_key = CatAny(key, "[", i, "]");
    int64_t element = 0;
    if (absl::Status status = ToInt64((*value)[i], element_key, &element); !status.ok()) {
      return status;
    }
    if (element < std::numeric_limits<int>::min() || element > std::numeric_limits<int>::max()) {
      return Error(element_key, CatAny("must fit in a 32-bit int, found ", element));
    }
    out->push_back(static_cast<int>(element));
  }
  return absl::OkStatus();
}

absl::Status KeyReader::FloatList(std::string_view key, std::vector<float>* out,
                                  bool required) const {
  const json* value = Find(key);
  if (value == nullptr) return Missing(key, required);
  if (!value->is_array()) return TypeError(key, "a list of numbers", *value);
  out->clear();
  for (size_t i = 0; i < value->size(); ++i) {
    float element = 0.0f;
    if (absl::Status status = ToFloat((*value)[i], CatAny(key, "[", i, "]"), &element);
        !status.ok()) {
      return status;
    }
    out->push_back(element);
  }
  return absl::OkStatus();
}

absl::StatusOr<KeyReader> KeyReader::Child(std::string_view key) const {
  const json* value = Find(key);
  if (value == nullptr) return Missing(key, /*required=*/true);
  if (!value->is_object()) return TypeError(key, "an object", *value);
  return KeyReader(*value, source_, CatAny(prefix_, key, "."));
}

absl::Status KeyReader::ToInt64(const json& value, std::string_view key, int64_t* out) const {
  if (value.is_number_unsigned()) {
    const uint64_t number = value.get<uint64_t>();
    if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(key, CatAny("must fit in a 64-bit int, found ", number));
    }
    *out = static_cast<int64_t>(number);
    return absl::OkStatus();
  }
  if (value.is_number_integer()) {
    *out = value.get<int64_t>();
    return absl::OkStatus();
  }
  return TypeError(key, "an integer", value);
}

absl::Status KeyReader::ToFloat(const json& value, std::string_view key, float* out) const {
  if (!value.is_number()) return TypeError(key, "a number", value);
  const double number = value.get<double>();
  if (!std::isfinite(number) || std::fabs(number) > std::numeric_limits<float>::max()) {
    return Error(key, CatAny("must be a finite 32-bit float, found ", number));
  }
  *out = static_cast<float>(number);
  return absl::OkStatus();
}

}  // namespace strata::engine
