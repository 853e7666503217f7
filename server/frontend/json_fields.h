// Typed, validated reads of one JSON object's fields. Every error is a 400 (api_error.h) whose
// param is the field's path ("messages[2].content") and whose message names the limit:
//   'temperature' must be a number in [0, 2]; got 3.5
// A field that is absent or JSON null reads as nullopt (the OpenAI SDKs and vLLM treat an
// explicit null as "use the default").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace strata::frontend {

class FieldReader {
 public:
  // `object` must be a JSON object and outlive the reader. `prefix` is prepended to field
  // names in errors ("messages[0]." → "messages[0].role").
  explicit FieldReader(const nlohmann::ordered_json& object, std::string prefix = "")
      : object_(object), prefix_(std::move(prefix)) {}

  // The field, or nullptr when absent or null.
  const nlohmann::ordered_json* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  std::string Path(std::string_view key) const { return prefix_ + std::string(key); }

  absl::StatusOr<std::optional<double>> Number(std::string_view key, double min, double max,
                                               bool min_exclusive = false) const;
  absl::StatusOr<std::optional<int64_t>> Integer(std::string_view key, int64_t min,
                                                 int64_t max) const;
  absl::StatusOr<std::optional<bool>> Bool(std::string_view key) const;
  absl::StatusOr<std::optional<std::string>> String(std::string_view key) const;

 private:
  const nlohmann::ordered_json& object_;
  std::string prefix_;
};

// "3.5", "1e+30", "-2" for messages (shortest form that round-trips well enough to read).
std::string FormatNumber(double value);
// A short, truncated rendering of a JSON value for error messages: its compact JSON text, cut
// at 60 characters. Only what is shown is rendered (iteratively: any depth, any size).
std::string Preview(const nlohmann::ordered_json& value);

// `object`'s string at `key`, or `fallback` when `object` is not an object or the key is absent
// or not a string: for the reads nlohmann's value(key, "…") would do, which throws (and so
// takes the server down) when a request puts another type there.
std::string StringOr(const nlohmann::ordered_json& object, std::string_view key,
                     std::string_view fallback);

// Parses JSON text that request field `param` carries (a json_schema string, tool-call
// arguments) with the limits of core/json_limits.h: a 400 naming `param` when it is not JSON
// ("'param' is not valid JSON: parse error at ...") or breaks a limit ("'param': JSON nesting
// deeper than 256 levels at byte 300 (the limit)").
absl::StatusOr<nlohmann::ordered_json> ParseJsonField(std::string_view text,
                                                      std::string_view param);

}  // namespace strata::frontend
