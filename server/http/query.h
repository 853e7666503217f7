// Query parameters of a request target ("/v1/files?purpose=batch&limit=2").
#pragma once

#include <string>
#include <string_view>

namespace strata::http {

// The percent-decoded value of `key` ('+' as a space), or empty when absent or empty.
std::string QueryParam(std::string_view target, std::string_view key);

}  // namespace strata::http
