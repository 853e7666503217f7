// String helpers with Python semantics for the template builtins (code points, not bytes).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata::engine::jinja {

// Code points of `s` as views (ill-formed bytes count one each).
std::vector<std::string_view> SplitCodePoints(std::string_view s);

// str.strip/lstrip/rstrip: `chars` nullptr strips Python whitespace, else those code points.
std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right);

// str.split / str.rsplit: `sep` nullptr splits on whitespace runs; maxsplit < 0 is unlimited.
std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit,
                                 bool from_right);

// str.replace: count < 0 replaces all; an empty `from` inserts between code points.
std::string PyReplace(std::string_view s, std::string_view from, std::string_view to,
                      int64_t count);

// ASCII case mapping (other characters unchanged).
std::string AsciiUpper(std::string_view s);
std::string AsciiLower(std::string_view s);
std::string PyTitle(std::string_view s);       // first letter of each word upper, rest lower
std::string PyCapitalize(std::string_view s);  // first character upper, rest lower

}  // namespace strata::engine::jinja
