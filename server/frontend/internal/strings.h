// Debian's Abseil 20220623 has its own absl::string_view (not std::string_view): absl string
// functions reject std::string_view arguments. Av()/Sv() convert at those call sites.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace strata::frontend::internal {

inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view Sv(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace strata::frontend::internal
