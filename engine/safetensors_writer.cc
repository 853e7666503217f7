#include "engine/safetensors_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace strata::engine {

std::string SafetensorsHeaderBytes(const std::vector<TensorHeader>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorHeader& tensor : tensors) {
    CHECK(tensor.name != "__metadata__") << "reserved tensor name";
    CHECK(names.insert(tensor.name).second) << "tensor '" << tensor.name << "' written twice";
    for (int64_t dim : tensor.shape) CHECK_GE(dim, 0) << "tensor '" << tensor.name << "'";
    const uint64_t expected_bytes =
        static_cast<uint64_t>(NumElements(tensor.shape)) * DTypeSize(tensor.dtype);
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(DTypeName(tensor.dtype));
    entry["shape"] = std::vector<int64_t>(tensor.shape.begin(), tensor.shape.end());
    entry["data_offsets"] = {offset, offset + expected_bytes};
    header[tensor.name] = std::move(entry);
    offset += expected_bytes;
  }

  std::string header_text = header.dump();
  // Pad with spaces so the data starts 8-byte aligned (the 8-byte length prefix keeps it so).
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string out;
  const uint64_t header_size = header_text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(header_size >> (8 * i)));
  return out + header_text;
}

std::vector<uint8_t> SerializeSafetensors(const std::vector<TensorToWrite>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  std::vector<TensorHeader> headers;
  uint64_t data_bytes = 0;
  for (const TensorToWrite& tensor : tensors) {
    const uint64_t expected_bytes =
        static_cast<uint64_t>(NumElements(tensor.shape)) * DTypeSize(tensor.dtype);
    CHECK_EQ(tensor.bytes.size(), expected_bytes)
        << "tensor '" << tensor.name << "' shape " << ShapeToString(tensor.shape) << " dtype "
        << DTypeName(tensor.dtype);
    headers.push_back({tensor.name, tensor.dtype, tensor.shape});
    data_bytes += expected_bytes;
  }
  const std::string header = SafetensorsHeaderBytes(headers, metadata);
  std::vector<uint8_t> out;
  out.reserve(header.size() + data_bytes);
  out.insert(out.end(), header.begin(), header.end());
  for (const TensorToWrite& tensor : tensors) {
    out.insert(out.end(), tensor.bytes.begin(), tensor.bytes.end());
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> bytes = SerializeSafetensors(tensors, metadata);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::InternalError("cannot create " + path + ": " + std::strerror(errno));
  }
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), file);
  const bool write_failed = written != bytes.size();
  const bool close_failed = std::fclose(file) != 0;
  if (write_failed || close_failed) {
    return absl::InternalError("cannot write " + path + ": wrote " + std::to_string(written) +
                               " of " + std::to_string(bytes.size()) + " bytes");
  }
  return absl::OkStatus();
}

}  // namespace strata::engine
