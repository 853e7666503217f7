// Text forms of values: JSON (the `tojson` filter) and the printed form of `{{ value }}`.
#pragma once

#include <optional>
#include <string>

#include "engine/tokenizer/jinja/value.h"

namespace strata::engine::jinja {

// Options of transformers' / @huggingface/jinja's tojson (Python json.dumps semantics).
struct JsonOptions {
  std::optional<int> indent;  // nullopt: one line
  bool ensure_ascii = false;  // escape everything outside U+0020..U+007E as \uXXXX
  bool sort_keys = false;     // by code point
  // Item and key separators; default (", ", ": ") on one line and (",", ": ") when indenting.
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
};

// JSON text of `value`. Undefined becomes null; namespaces serialise like objects. Errors for
// callables (not JSON) and for nesting deeper than 512.
absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options = {});

// The printed form used by {{ }}, `~` and |string: strings as-is, none and undefined empty,
// booleans "true"/"false" and arrays/objects as JSON with ", " / ": " — the choices of
// @huggingface/jinja (Python Jinja2 prints None, True and Python reprs instead).
std::string ToDisplayString(const Value& value);

// The form a value takes in string concatenation (`+` with a string, `~`): as
// ToDisplayString, except (like JavaScript's String(), which @huggingface/jinja uses there)
// integral floats print without ".0", arrays print their items joined by "," without brackets
// and objects print "[object Map]". Python Jinja2 would raise for arrays and objects instead.
std::string ToConcatString(const Value& value);

}  // namespace strata::engine::jinja
