#include "engine/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/status.h"

namespace strata::engine {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // 100 MiB, as the reference reader
constexpr size_t kMaxNameInMessage = 256;

// Concatenates anything streamable (absl::StrCat does not take std::string_view here: Debian's
// Abseil 20220623 has its own absl::string_view).
template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

std::string Quoted(std::string_view name) {
  if (name.size() <= kMaxNameInMessage) return Cat("'", name, "'");
  return Cat("'", name.substr(0, kMaxNameInMessage), "...'");
}

// A short description of a JSON value; never dumps nested values (their size is unbounded).
std::string Describe(const json& value) {
  if (value.is_number_unsigned()) return Cat("integer ", value.get<uint64_t>());
  if (value.is_number_integer()) return Cat("integer ", value.get<int64_t>());
  if (value.is_number_float()) return Cat("number ", value.get<double>());
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_string()) return Cat("string ", Quoted(value.get_ref<const std::string&>()));
  if (value.is_array()) return Cat("a list of length ", value.size());
  return Cat("a JSON ", value.type_name());
}

absl::Status FileError(std::string_view file, std::string_view message) {
  return absl::InvalidArgumentError(Cat(file, ": ", message));
}

absl::Status TensorError(std::string_view file, std::string_view name, std::string_view message) {
  return absl::InvalidArgumentError(Cat(file, ": tensor ", Quoted(name), " ", message));
}

// A JSON integer >= 0 (nlohmann stores those as unsigned; negative ones as signed).
bool AsNonNegative(const json& value, uint64_t* out) {
  if (!value.is_number_unsigned()) return false;
  *out = value.get<uint64_t>();
  return true;
}

std::string KnownDTypes() {
  std::string names;
  for (DType dtype :
       {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2,
        DType::kU8, DType::kI8, DType::kI16, DType::kI32, DType::kI64, DType::kBool}) {
    names += names.empty() ? "" : ", ";
    names += DTypeName(dtype);
  }
  return names;
}

// Parses `shape` and its element count. The product of the non-zero dims must fit in int64, so
// every partial product (NumElements, ContiguousStrides) does too, whatever the order.
absl::Status ParseShape(const json& value, std::string_view file, std::string_view name,
                        Shape* shape, uint64_t* num_elements) {
  if (!value.is_array()) {
    return TensorError(
        file, name, Cat("shape must be a list of non-negative integers, found ", Describe(value)));
  }
  shape->clear();
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t nonzero_product = 1;
  bool has_zero = false;
  for (const json& dim_value : value) {
    uint64_t dim = 0;
    if (!AsNonNegative(dim_value, &dim)) {
      return TensorError(file, name,
                         Cat("shape must be a list of non-negative integers, found element ",
                             Describe(dim_value)));
    }
    has_zero = has_zero || dim == 0;
    if (dim != 0 && (__builtin_mul_overflow(nonzero_product, dim, &nonzero_product) ||
                     nonzero_product > kMax)) {
      return TensorError(file, name, "shape has more elements than fit in 64 bits");
    }
    shape->push_back(static_cast<int64_t>(dim));
  }
  *num_elements = has_zero ? 0 : nonzero_product;
  return absl::OkStatus();
}

struct Range {
  uint64_t begin;
  uint64_t end;
  const std::string* name;
};

absl::StatusOr<DType> ParseDType(const json& entry, std::string_view file, std::string_view name) {
  auto it = entry.find("dtype");
  if (it == entry.end()) {
    return TensorError(file, name, "has no \"dtype\" (expected a string such as \"BF16\")");
  }
  if (!it->is_string()) {
    return TensorError(file, name, Cat("dtype must be a string, found ", Describe(*it)));
  }
  std::optional<DType> dtype = DTypeFromName(it->get_ref<const std::string&>());
  if (!dtype) {
    return TensorError(file, name,
                       Cat("has unknown dtype ", Quoted(it->get_ref<const std::string&>()),
                           " (expected one of ", KnownDTypes(), ")"));
  }
  return *dtype;
}

// data_offsets = [begin, end]: two non-negative integers with begin <= end <= data_size.
absl::Status ParseOffsets(const json& entry, uint64_t data_size, std::string_view file,
                          std::string_view name, uint64_t* begin, uint64_t* end) {
  auto it = entry.find("data_offsets");
  if (it == entry.end()) {
    return TensorError(file, name, "has no \"data_offsets\" (expected [begin, end])");
  }
  constexpr std::string_view kExpected =
      "data_offsets must be [begin, end], two non-negative integers; found ";
  if (!it->is_array() || it->size() != 2) {
    return TensorError(file, name, Cat(kExpected, Describe(*it)));
  }
  for (int i = 0; i < 2; ++i) {
    if (!AsNonNegative((*it)[i], i == 0 ? begin : end)) {
      return TensorError(file, name, Cat(kExpected, "element ", Describe((*it)[i])));
    }
  }
  const std::string offsets = Cat("data_offsets [", *begin, ", ", *end, "]");
  if (*begin > *end) return TensorError(file, name, Cat(offsets, " have begin > end"));
  if (*end > data_size) {
    return TensorError(
        file, name,
        Cat(offsets, " end beyond the data section of ", data_size, " bytes (file truncated?)"));
  }
  return absl::OkStatus();
}

// One tensor entry of the header: dtype, shape, data_offsets, all checked against the data
// section of `data_size` bytes that starts at `data`.
absl::StatusOr<TensorInfo> ParseEntry(const std::string& name, const json& entry,
                                      const uint8_t* data, uint64_t data_size,
                                      std::string_view file, Range* range) {
  if (!entry.is_object()) {
    return TensorError(file, name, Cat("must be a JSON object, found ", Describe(entry)));
  }
  TensorInfo info;
  info.file = std::string(file);
  ASSIGN_OR_RETURN(info.dtype, ParseDType(entry, file, name));
  auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) {
    return TensorError(file, name, "has no \"shape\" (expected a list of non-negative integers)");
  }
  uint64_t num_elements = 0;
  RETURN_IF_ERROR(ParseShape(*shape_it, file, name, &info.shape, &num_elements));
  uint64_t begin = 0;
  uint64_t end = 0;
  RETURN_IF_ERROR(ParseOffsets(entry, data_size, file, name, &begin, &end));
  uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(num_elements, uint64_t{DTypeSize(info.dtype)}, &expected_bytes) ||
      expected_bytes != end - begin) {
    return TensorError(
        file, name,
        Cat("data_offsets [", begin, ", ", end, "] span ", end - begin, " bytes, but shape ",
            ShapeToString(info.shape), " of ", DTypeName(info.dtype), " needs ", num_elements,
            " x ", DTypeSize(info.dtype), " bytes"));
  }
  info.data = data + begin;
  info.num_bytes = static_cast<size_t>(end - begin);
  *range = Range{begin, end, &name};
  return info;
}

absl::Status ParseMetadata(const json& value, std::string_view file,
                           std::map<std::string, std::string>* metadata) {
  if (!value.is_object()) {
    return FileError(file,
                     Cat("__metadata__ must be an object of strings, found ", Describe(value)));
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!it.value().is_string()) {
      return FileError(file, Cat("__metadata__ must map strings to strings; key ", Quoted(it.key()),
                                 " holds ", Describe(it.value())));
    }
    if (metadata != nullptr) (*metadata)[it.key()] = it.value().get<std::string>();
  }
  return absl::OkStatus();
}

// Byte ranges of different (non-empty) tensors must not share a byte.
absl::Status CheckNoOverlap(std::vector<Range> ranges, std::string_view file) {
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Range* furthest = nullptr;  // the range seen so far that ends last
  for (const Range& range : ranges) {
    if (range.begin == range.end) continue;
    if (furthest != nullptr && range.begin < furthest->end) {
      return FileError(
          file, Cat("tensors ", Quoted(*furthest->name), " (data_offsets [", furthest->begin, ", ",
                    furthest->end, "]) and ", Quoted(*range.name), " (data_offsets [", range.begin,
                    ", ", range.end, "]) overlap"));
    }
    if (furthest == nullptr || range.end > furthest->end) furthest = &range;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, TensorInfo>> ParseHeader(
    const uint8_t* bytes, size_t size, std::string_view file,
    std::map<std::string, std::string>* metadata) {
  if (size < 8) {
    return FileError(
        file, Cat("file is ", size, " bytes, too short for the 8-byte safetensors header length"));
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];
  if (header_size > size - 8) {
    return FileError(file, Cat("header length ", header_size, " exceeds the ", size - 8,
                               " bytes after the length field (file truncated or not "
                               "safetensors)"));
  }
  if (header_size > kMaxHeaderBytes) {
    return FileError(file, Cat("header length ", header_size, " exceeds the limit of ",
                               kMaxHeaderBytes, " bytes"));
  }
  const char* header_text = reinterpret_cast<const char*>(bytes + 8);
  const json header = json::parse(header_text, header_text + header_size, /*cb=*/nullptr,
                                  /*allow_exceptions=*/false);
  if (header.is_discarded()) return FileError(file, "header is not valid JSON");
  if (!header.is_object()) {
    return FileError(file, Cat("header must be a JSON object, found ", Describe(header)));
  }
  const uint8_t* data = bytes + 8 + header_size;
  const uint64_t data_size = size - 8 - header_size;
  std::map<std::string, TensorInfo> tensors;
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      RETURN_IF_ERROR(ParseMetadata(it.value(), file, metadata));
      continue;
    }
    Range range{};
    ASSIGN_OR_RETURN(TensorInfo info,
                     ParseEntry(it.key(), it.value(), data, data_size, file, &range));
    auto [slot, inserted] = tensors.emplace(it.key(), std::move(info));
    range.name = &slot->first;
    ranges.push_back(range);
  }
  RETURN_IF_ERROR(CheckNoOverlap(std::move(ranges), file));
  return tensors;
}

absl::StatusOr<std::map<std::string, TensorInfo>> ParseHeaderNoThrow(
    const uint8_t* bytes, size_t size, std::string_view file,
    std::map<std::string, std::string>* metadata) {
  try {
    return ParseHeader(bytes, size, file, metadata);
  } catch (const json::exception& e) {
    return FileError(file, Cat("malformed safetensors header: ", e.what()));
  }
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(Cat("cannot open ", path));
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return absl::DataLossError(Cat("error reading ", path));
  return text.str();
}

// A shard name from weight_map: a relative path inside the checkpoint directory.
bool IsSafeShardName(const std::string& name) {
  if (name.empty() || name.front() == '/') return false;
  std::string_view rest = name;
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    if (rest.substr(0, slash) == "..") return false;
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  return true;
}

// weight_map of model.safetensors.index.json: tensor name → shard file name.
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::string& index_path) {
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(index_path));
  try {
    const json index = json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded()) return FileError(index_path, "not valid JSON");
    if (!index.is_object()) return FileError(index_path, "must be a JSON object");
    auto map_it = index.find("weight_map");
    if (map_it == index.end() || !map_it->is_object()) {
      return FileError(index_path, "has no \"weight_map\" object (tensor name -> shard file)");
    }
    std::map<std::string, std::string> weight_map;
    for (auto it = map_it->begin(); it != map_it->end(); ++it) {
      if (!it.value().is_string() || !IsSafeShardName(it.value().get<std::string>())) {
        return FileError(index_path,
                         Cat("weight_map entry for tensor ", Quoted(it.key()),
                             " must be a shard file name inside the checkpoint directory, found ",
                             Describe(it.value())));
      }
      weight_map[it.key()] = it.value().get<std::string>();
    }
    return weight_map;
  } catch (const json::exception& e) {
    return FileError(index_path, Cat("malformed index: ", e.what()));
  }
}

std::string DTypeList(std::initializer_list<DType> dtypes) {
  std::string names;
  for (DType dtype : dtypes) {
    if (!names.empty()) names += " or ";
    names += DTypeName(dtype);
  }
  return names;
}

// The shard files named by model.safetensors.index.json (each checked to exist).
absl::StatusOr<std::set<std::string>> ShardNames(
    const std::string& dir, const std::string& index_path,
    const std::map<std::string, std::string>& weight_map) {
  if (weight_map.empty()) return FileError(index_path, "weight_map is empty");
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map) {
    if (!shard_names.insert(shard).second) continue;
    if (!PathExists(dir + "/" + shard)) {
      return absl::NotFoundError(Cat(index_path, ": weight_map assigns tensor ", Quoted(tensor),
                                     " to shard ", Quoted(shard), ", but ", dir, "/", shard,
                                     " does not exist"));
    }
  }
  return shard_names;
}

}  // namespace

absl::StatusOr<std::map<std::string, TensorInfo>> ParseSafetensors(const uint8_t* bytes,
                                                                   size_t size,
                                                                   std::string_view file_name) {
  return ParseHeaderNoThrow(bytes, size, file_name, /*metadata=*/nullptr);
}

// ---- SafetensorsFile -----------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const std::string message = Cat("cannot open ", path, ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    return absl::PermissionDeniedError(message);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(Cat(path, ": not a regular file"));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      return absl::InternalError(Cat("cannot mmap ", path, ": ", std::strerror(error)));
    }
    file->map_ = map;
    file->map_size_ = size;
  }
  ::close(fd);
  static constexpr uint8_t kEmpty[1] = {0};
  const uint8_t* bytes = size > 0 ? static_cast<const uint8_t*>(file->map_) : kEmpty;
  ASSIGN_OR_RETURN(file->tensors_, ParseHeaderNoThrow(bytes, size, path, &file->metadata_));
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

// ---- Checkpoint ----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return absl::NotFoundError(Cat("checkpoint directory ", dir, " does not exist"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(Cat("checkpoint path ", dir, " is not a directory"));
  }
  auto checkpoint = std::make_unique<Checkpoint>();
  checkpoint->dir_ = dir;
  ASSIGN_OR_RETURN(checkpoint->config_, LoadModelConfig(dir));
  RETURN_IF_ERROR(checkpoint->config_.Validate());

  const std::string single_path = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  std::set<std::string> shard_names;
  if (PathExists(single_path)) {
    shard_names.insert("model.safetensors");
  } else if (PathExists(index_path)) {
    ASSIGN_OR_RETURN(weight_map, ReadWeightMap(index_path));
    ASSIGN_OR_RETURN(shard_names, ShardNames(dir, index_path, weight_map));
  } else {
    return absl::NotFoundError(Cat("checkpoint directory ", dir,
                                   " has neither model.safetensors nor "
                                   "model.safetensors.index.json"));
  }
  for (const std::string& shard : shard_names) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                     SafetensorsFile::Open(dir + "/" + shard));
    RETURN_IF_ERROR(checkpoint->AddFile(std::move(file)));
  }
  RETURN_IF_ERROR(checkpoint->CheckWeightMap(index_path, weight_map));
  return checkpoint;
}

absl::Status Checkpoint::AddFile(std::unique_ptr<SafetensorsFile> file) {
  for (const auto& [name, info] : file->tensors()) {
    auto [it, inserted] = index_.emplace(name, &info);
    if (!inserted) {
      return absl::InvalidArgumentError(Cat("tensor ", Quoted(name), " is stored twice: in ",
                                            it->second->file, " and in ", info.file));
    }
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::Status Checkpoint::CheckWeightMap(
    const std::string& index_path, const std::map<std::string, std::string>& weight_map) const {
  for (const auto& [tensor, shard] : weight_map) {
    auto it = index_.find(tensor);
    const std::string shard_path = dir_ + "/" + shard;
    if (it == index_.end()) {
      return absl::InvalidArgumentError(Cat(index_path, ": weight_map assigns tensor ",
                                            Quoted(tensor), " to ", shard_path,
                                            ", but that file does not contain it"));
    }
    if (it->second->file != shard_path) {
      return absl::InvalidArgumentError(
          Cat(index_path, ": weight_map assigns tensor ", Quoted(tensor), " to ", shard_path,
              ", but that file does not contain it (it is in ", it->second->file, ")"));
    }
  }
  return absl::OkStatus();
}

bool Checkpoint::Has(std::string_view name) const { return index_.find(name) != index_.end(); }

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, info] : index_) names.push_back(name);
  return names;
}

absl::StatusOr<const TensorInfo*> Checkpoint::Find(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(Cat("tensor ", Quoted(name), " not found in checkpoint ", dir_));
  }
  return it->second;
}

absl::StatusOr<const TensorInfo*> Checkpoint::Get(std::string_view name, const Shape& shape,
                                                  std::initializer_list<DType> dtypes) const {
  CHECK(dtypes.size() > 0) << "Checkpoint::Get needs at least one accepted dtype";
  ASSIGN_OR_RETURN(const TensorInfo* info, Find(name));
  if (std::find(dtypes.begin(), dtypes.end(), info->dtype) == dtypes.end()) {
    return absl::InvalidArgumentError(Cat("tensor ", Quoted(name), " in ", info->file,
                                          ": expected dtype ", DTypeList(dtypes), ", found ",
                                          DTypeName(info->dtype)));
  }
  if (info->shape != shape) {
    return absl::InvalidArgumentError(Cat("tensor ", Quoted(name), " in ", info->file,
                                          ": expected shape ", ShapeToString(shape), ", found ",
                                          ShapeToString(info->shape)));
  }
  return info;
}

}  // namespace strata::engine
