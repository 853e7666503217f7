// Debian's Abseil 20220623 is built with its own absl::string_view (not std::string_view), so
// absl::StrCat/StrAppend reject std::string_view. Av() converts at such call sites; Cat() and
// Append() are StrCat/StrAppend that take std::string_view, absl::string_view, strings,
// C strings and numbers alike.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace strata::engine::internal {

inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view Sv(absl::string_view s) { return std::string_view(s.data(), s.size()); }

template <typename T>
void AppendPiece(std::string* out, const T& piece) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, char>) {
    absl::StrAppend(out, piece);
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out->append(std::string_view(piece));
  } else {
    const absl::string_view view = piece;
    out->append(view.data(), view.size());
  }
}

template <typename... Args>
void Append(std::string* out, const Args&... args) {
  (AppendPiece(out, args), ...);
}

template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  Append(&out, args...);
  return out;
}

}  // namespace strata::engine::internal
