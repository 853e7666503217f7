// Pieces of JSON text as Python's json module writes and reads them, shared by the Jinja
// `tojson` filter (jinja/json_format.h), Kimi K3's prompt renderer (xtml_renderer.h) and K3's
// tool-call argument values (xtml_argument_value.h), which all must match Python byte for byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace strata::engine {

// Python's repr() of a float: the shortest digits that read back as `x` (std::to_chars, as
// Python's repr), positional when 1e-4 <= |x| < 1e16 with ".0" on a whole number ("1.0",
// "0.0001", "-0.0"), else d.ddde±XX ("1e-05", "1e+16"); "nan", "inf" and "-inf".
std::string PythonFloatRepr(double x);

// json.dumps of a float: PythonFloatRepr, except "NaN", "Infinity" and "-Infinity".
std::string PythonJsonFloat(double x);

// Appends byte `c` as json.dumps writes it inside a string literal: \" \\ \n \r \t \b \f, the
// other control characters (below 0x20) as \u00xx, DEL (0x7F) as \u007f with `ensure_ascii`,
// every other byte as it is. Bytes from 0x80 up are copied: escaping or replacing non-ASCII
// text is the caller's choice.
void AppendJsonStringByte(char c, bool ensure_ascii, std::string* out);

// The character that the one-letter backslash escape `\letter` stands for in both JSON and
// Python string literals: \" \\ \b \f \n \r \t; nullopt for any other letter (each grammar's
// own escapes, such as JSON's \/ or Python's \' and \v, and \u, are the caller's).
std::optional<char> SimpleEscapeChar(char letter);

// The value of `digits`, all hexadecimal digits (either case); nullopt when `digits` is empty,
// longer than 8 or holds anything else.
std::optional<uint32_t> ParseHexDigits(std::string_view digits);

// `v` with the keys of every object in it sorted, as json.dumps(sort_keys=True) orders them
// (Python's sorted() on str keys is code point order, which is UTF-8 byte order); arrays keep
// their order.
nlohmann::ordered_json SortKeysDeep(const nlohmann::ordered_json& v);

}  // namespace strata::engine
