// SHA-256 (FIPS 180-4), used to recognise well-known vocabulary files by content.
#pragma once

#include <string>
#include <string_view>

namespace strata::engine {

// Lower-case hex digest of `data`.
std::string Sha256Hex(std::string_view data);

}  // namespace strata::engine
