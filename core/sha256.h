// SHA-256 (FIPS 180-4): well-known vocabulary files and images are recognised by content.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

// Lower-case hex digest of `data`.
std::string Sha256Hex(std::string_view data);

// The digest's first 8 bytes as a big-endian integer (a content key: images in prefix-cache
// hashes and the encoder cache).
uint64_t Sha256Prefix64(std::string_view data);

}  // namespace strata
