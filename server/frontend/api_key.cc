#include "server/frontend/api_key.h"

namespace strata::frontend {
namespace {

bool SameKey(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

}  // namespace

bool BearerMatches(std::string_view authorization, std::string_view key) {
  for (std::string_view prefix : {"Bearer ", "bearer "}) {
    if (authorization.substr(0, prefix.size()) == prefix) {
      return SameKey(authorization.substr(prefix.size()), key);
    }
  }
  return false;
}

bool KeyMatches(std::string_view value, std::string_view key) { return SameKey(value, key); }

}  // namespace strata::frontend
