// Shared by the fuzz targets whose input is two texts: the part before the first NUL byte and
// the part after it (empty when there is no NUL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

inline std::pair<std::string_view, std::string_view> SplitAtNul(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  if (split == std::string_view::npos) return {input, {}};
  return {input.substr(0, split), input.substr(split + 1)};
}
