#include "core/npy.h"

#include <cstdio>
#include <cstring>
#include <memory>

namespace strata {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

}  // namespace

absl::Status WriteNpyF32(const std::string& path, const float* data,
                         const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t count = 1;
  for (int64_t d : shape) {
    dims += std::to_string(d) + ", ";
    count *= d;
  }
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic(6) + version(2) + length(2) + header + '\n' is padded to a multiple of 64
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) return absl::NotFoundError("cannot open " + path + " for writing");
  const uint16_t header_len = static_cast<uint16_t>(header.size());
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  bool ok = std::fwrite(magic, 1, 8, f.get()) == 8 &&
            std::fwrite(&header_len, 2, 1, f.get()) == 1 &&
            std::fwrite(header.data(), 1, header.size(), f.get()) == header.size() &&
            std::fwrite(data, sizeof(float), static_cast<size_t>(count), f.get()) ==
                static_cast<size_t>(count);
  if (!ok) return absl::DataLossError("short write to " + path);
  return absl::OkStatus();
}

absl::StatusOr<NpyArray> ReadNpyF32(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return absl::NotFoundError("cannot open " + path);
  char magic[8];
  uint16_t header_len = 0;
  if (std::fread(magic, 1, 8, f.get()) != 8 || std::memcmp(magic, "\x93NUMPY", 6) != 0 ||
      magic[6] != 1 || std::fread(&header_len, 2, 1, f.get()) != 1) {
    return absl::InvalidArgumentError(path + ": not a version 1 .npy file");
  }
  std::string header(header_len, '\0');
  if (std::fread(header.data(), 1, header_len, f.get()) != header_len) {
    return absl::InvalidArgumentError(path + ": truncated header");
  }
  if (header.find("'descr': '<f4'") == std::string::npos ||
      header.find("'fortran_order': False") == std::string::npos) {
    return absl::InvalidArgumentError(path + ": expected little-endian float32 in C order");
  }
  NpyArray array;
  size_t open = header.find('('), close = header.find(')');
  if (open == std::string::npos || close == std::string::npos || close < open) {
    return absl::InvalidArgumentError(path + ": no shape in header");
  }
  int64_t count = 1;
  const char* p = header.c_str() + open + 1;
  while (p < header.c_str() + close) {
    char* end = nullptr;
    long long d = std::strtoll(p, &end, 10);
    if (end == p) break;
    if (d < 0) return absl::InvalidArgumentError(path + ": negative dimension");
    array.shape.push_back(d);
    count *= d;
    p = end;
    while (*p == ',' || *p == ' ') ++p;
  }
  array.data.resize(static_cast<size_t>(count));
  if (std::fread(array.data.data(), sizeof(float), array.data.size(), f.get()) !=
      array.data.size()) {
    return absl::InvalidArgumentError(path + ": truncated data");
  }
  return array;
}

}  // namespace strata
