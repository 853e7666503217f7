// Reading checkpoints: safetensors files (single or sharded), memory-mapped, zero-copy.
//
// A checkpoint directory holds config.json and either model.safetensors or shards listed in
// model.safetensors.index.json. Every header is validated before any tensor is exposed:
// a view never points outside its file. Errors name the file, the tensor and the expectation.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "engine/model_config.h"

namespace strata::engine {

struct TensorInfo {
  DType dtype = DType::kF32;
  Shape shape;
  // Points into the mapped file. Not necessarily aligned to the element size: the format
  // does not require the header length to be a multiple of 8 (our writer pads it so).
  const uint8_t* data = nullptr;
  size_t num_bytes = 0;
  std::string file;  // path of the file that holds it (for messages)
};

// Parses a safetensors header. `bytes` is the whole file; the returned tensors point into it.
// Validates: 8-byte length present, header length ≤ file size − 8, JSON object, known dtypes,
// shapes non-negative, data_offsets in range, byte size == prod(shape)·dtype size, no overlap.
absl::StatusOr<std::map<std::string, TensorInfo>> ParseSafetensors(const uint8_t* bytes,
                                                                   size_t size,
                                                                   std::string_view file_name);

// One memory-mapped safetensors file.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A whole checkpoint directory: config + all tensors of every shard.
class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const ModelConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  bool Has(std::string_view name) const;
  std::vector<std::string> TensorNames() const;

  // The tensor `name` (full on-disk name) if present, with its dtype among `dtypes` and its
  // shape equal to `shape`; otherwise a NotFound/InvalidArgument error naming the file, the
  // tensor, what was expected and what was found.
  absl::StatusOr<const TensorInfo*> Get(std::string_view name, const Shape& shape,
                                        std::initializer_list<DType> dtypes) const;
  // Same, without shape/dtype expectations.
  absl::StatusOr<const TensorInfo*> Find(std::string_view name) const;

 private:
  // Takes ownership of `file` and indexes its tensors; a name already indexed is an error.
  absl::Status AddFile(std::unique_ptr<SafetensorsFile> file);
  // Every weight_map entry (tensor → shard) names a tensor that this shard really holds.
  absl::Status CheckWeightMap(const std::string& index_path,
                              const std::map<std::string, std::string>& weight_map) const;

  std::string dir_;
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*, std::less<>> index_;
};

}  // namespace strata::engine
