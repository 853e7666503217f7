// Writing safetensors files (tools and tests): header JSON padded to 8 bytes, then the data
// in the order given. The inverse of ParseSafetensors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace strata::engine {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<uint8_t> bytes;  // prod(shape) · DTypeSize(dtype) bytes, little-endian
};

// Serialises a complete safetensors file into memory.
std::vector<uint8_t> SerializeSafetensors(const std::vector<TensorToWrite>& tensors,
                                          const std::map<std::string, std::string>& metadata);
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace strata::engine
