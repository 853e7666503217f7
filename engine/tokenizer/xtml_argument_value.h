// The value of one typed XTML tool-call argument (docs/k3-format.md "Output") as the JSON text
// that goes into the call's `arguments`, exactly as the anchors (vLLM's and SGLang's kimi_k3
// parsers) write it: they decode the body with Python's json.loads and the whole arguments
// object with json.dumps(ensure_ascii=False). So:
//   * type "string" (or no type): the raw body as a JSON string;
//   * any other type: the body parsed as Python's json module does (whitespace ' \t\n\r'
//     around, NaN / Infinity / -Infinity accepted, no control characters inside strings,
//     duplicate object keys keep their first place and their last value) and written back with
//     Python's separators (", " and ": "), integers as written ("-0" → "0"), floats in Python's
//     repr (shortest round trip: 1.0, 1e+16, 1e-05), non-ASCII kept; a body that does not parse
//     is taken as the raw string.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::engine::xtml {

// `text` as a JSON string literal, escaped as Python's json.dumps(ensure_ascii=False) does
// (\" \\ \n \r \t \b \f, other control characters as \u00xx, everything else as is).
std::string PythonJsonString(std::string_view text);

// The body parsed with json.loads and written back with json.dumps; nullopt when Python would
// raise (not JSON, or nested deeper than kMaxArgumentDepth, where Python would hit its
// recursion limit).
std::optional<std::string> PythonJsonRoundTrip(std::string_view body);
inline constexpr int kMaxArgumentDepth = 512;

// The JSON text of argument `body` typed `type` (the "string" rules above for a missing type).
std::string ArgumentValueJson(std::string_view body, std::optional<std::string_view> type);

// The `arguments` object of a call from its (key, value JSON) pairs in order: a repeated key
// keeps its first place and takes its last value (Python's dict); "{}" when there are none.
std::string ArgumentsObjectJson(const std::vector<std::pair<std::string, std::string>>& entries);

}  // namespace strata::engine::xtml
