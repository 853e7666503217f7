// Standard base64 (RFC 4648, '+' '/' alphabet, '=' padding) as used by tiktoken vocab files.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace strata::engine {

std::string Base64Encode(std::string_view bytes);

// Returns nullopt for characters outside the alphabet or a length that is not a multiple of 4.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace strata::engine
