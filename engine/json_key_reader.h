// Typed reading of config-file keys (config.json, preprocessor_config.json) with error messages
// that name the file and the key path: "<source>: <prefix><key> must be ..., found ...".
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::engine {

// Concatenates anything streamable (absl::StrCat does not take std::string_view here: Debian's
// Abseil 20220623 has its own absl::string_view).
template <typename... Args>
std::string CatAny(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// The longest string value quoted whole in an error message; longer ones are cut with "...".
inline constexpr int kMaxStringInMessage = 64;

// A short description of a JSON value for error messages ("string \"gelu\"", "an array"). Never
// dumps nested values (their size is unbounded).
std::string DescribeJson(const nlohmann::json& value);

// Reads typed keys of one JSON object. Absent and null keys are "missing": an error when
// required, otherwise the output keeps its default. The reader refers to `object` and `source`;
// both must outlive it.
class KeyReader {
 public:
  KeyReader(const nlohmann::json& object, std::string_view source, std::string prefix)
      : object_(object), source_(source), prefix_(std::move(prefix)) {}

  const std::string& prefix() const { return prefix_; }
  std::string_view source() const { return source_; }

  // The value of `key`, or nullptr when absent or null.
  const nlohmann::json* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  absl::Status Error(std::string_view key, std::string_view message) const;
  absl::Status TypeError(std::string_view key, std::string_view expected,
                         const nlohmann::json& found) const;
  absl::Status Missing(std::string_view key, bool required) const;

  absl::Status Int64(std::string_view key, int64_t* out, bool required) const;
  absl::Status Int(std::string_view key, int* out, bool required) const;
  absl::Status Float(std::string_view key, float* out, bool required) const;
  absl::Status Bool(std::string_view key, bool* out, bool required) const;
  absl::Status String(std::string_view key, std::string* out, bool required) const;
  absl::Status IntList(std::string_view key, std::vector<int>* out, bool required) const;
  absl::Status FloatList(std::string_view key, std::vector<float>* out, bool required) const;

  // A reader for the nested object `key` (required).
  absl::StatusOr<KeyReader> Child(std::string_view key) const;

 private:
  absl::Status ToInt64(const nlohmann::json& value, std::string_view key, int64_t* out) const;
  absl::Status ToFloat(const nlohmann::json& value, std::string_view key, float* out) const;

  const nlohmann::json& object_;
  std::string_view source_;
  std::string prefix_;
};

}  // namespace strata::engine
