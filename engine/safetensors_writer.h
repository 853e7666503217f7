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

// What a file's header says of one tensor; its prod(shape) · DTypeSize(dtype) bytes follow the
// previous tensor's.
struct TensorHeader {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
};

// The first bytes of a safetensors file holding `tensors` in this order: the 8-byte header
// length and the JSON header, padded with spaces so the data starts 8-byte aligned. CHECKs
// names unique and not "__metadata__", dimensions ≥ 0.
std::string SafetensorsHeaderBytes(const std::vector<TensorHeader>& tensors,
                                   const std::map<std::string, std::string>& metadata);

// Serialises a complete safetensors file into memory.
std::vector<uint8_t> SerializeSafetensors(const std::vector<TensorToWrite>& tensors,
                                          const std::map<std::string, std::string>& metadata);
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace strata::engine
