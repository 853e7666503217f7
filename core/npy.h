// NumPy .npy files (format version 1.0), little-endian float32, C order: the exchange format
// of `strata logits` with independent reference implementations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

absl::Status WriteNpyF32(const std::string& path, const float* data,
                         const std::vector<int64_t>& shape);

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
// Reads a '<f4' C-order .npy file.
absl::StatusOr<NpyArray> ReadNpyF32(const std::string& path);

}  // namespace strata
