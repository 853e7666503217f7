// offload_key.h: key names, identity validation and fingerprint, checkpoint fingerprint.
#include "kvcache/offload/offload_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "kvcache/offload/content_hash.h"

namespace strata::kvcache {
namespace {

namespace fs = std::filesystem;

// Reads `size` bytes at `offset` of `fd` into `out`; DataLoss naming `path` on a short read.
absl::Status ReadExactly(int fd, const std::string& path, int64_t offset, int64_t size,
                         std::string* out) {
  out->resize(static_cast<size_t>(size));
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out->data() + done, static_cast<size_t>(size - done),
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::DataLossError(absl::StrCat("cannot read ", size, " bytes at offset ", offset,
                                              " of ", path, ": ",
                                              n < 0 ? std::strerror(errno) : "file too short"));
    }
    done += n;
  }
  return absl::OkStatus();
}

// Folds one safetensors file into `hasher`: name, size, header, sampled data windows.
absl::Status HashSafetensorsFile(const fs::path& path, ContentHasher* hasher) {
  const std::string name = path.string();
  const ScopedFd fd(::open(name.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", name, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return absl::DataLossError(absl::StrCat("cannot stat ", name, ": ", std::strerror(errno)));
  }
  const int64_t size_bytes = st.st_size;
  hasher->UpdateString(path.filename().string());
  hasher->UpdateU64(static_cast<uint64_t>(size_bytes));
  std::string buffer;
  if (absl::Status s = ReadExactly(fd.get(), name, 0, 8, &buffer); !s.ok()) return s;
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) {
    header_bytes = (header_bytes << 8) | static_cast<uint8_t>(buffer[i]);
  }
  if (header_bytes > static_cast<uint64_t>(kFingerprintMaxHeaderBytes) ||
      header_bytes > static_cast<uint64_t>(size_bytes - 8)) {
    return absl::DataLossError(
        absl::StrCat(name, ": safetensors header length ", header_bytes, " exceeds the file (",
                     size_bytes, " bytes) or the limit of ", kFingerprintMaxHeaderBytes, " bytes"));
  }
  if (absl::Status s = ReadExactly(fd.get(), name, 8, static_cast<int64_t>(header_bytes), &buffer);
      !s.ok()) {
    return s;
  }
  hasher->UpdateString(buffer);
  const int64_t data_begin = 8 + static_cast<int64_t>(header_bytes);
  const int64_t data_bytes = size_bytes - data_begin;
  if (data_bytes <= kFingerprintSamplesPerFile * kFingerprintSampleBytes) {
    if (absl::Status s = ReadExactly(fd.get(), name, data_begin, data_bytes, &buffer); !s.ok()) {
      return s;
    }
    hasher->UpdateString(buffer);
    return absl::OkStatus();
  }
  // Evenly spaced windows, the first at the start of the data, the last ending at its end.
  const int64_t span_bytes = data_bytes - kFingerprintSampleBytes;
  for (int i = 0; i < kFingerprintSamplesPerFile; ++i) {
    const int64_t offset = data_begin + i * span_bytes / (kFingerprintSamplesPerFile - 1);
    if (absl::Status s = ReadExactly(fd.get(), name, offset, kFingerprintSampleBytes, &buffer);
        !s.ok()) {
      return s;
    }
    hasher->UpdateU64(static_cast<uint64_t>(offset));
    hasher->UpdateString(buffer);
  }
  return absl::OkStatus();
}

absl::Status HashConfig(const std::string& model_dir, ContentHasher* hasher) {
  const std::string path = model_dir + "/config.json";
  const ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("kv offload: cannot fingerprint checkpoint ", model_dir,
                                            ": cannot open ", path, ": ", std::strerror(errno)));
  }
  if (st.st_size > kFingerprintMaxConfigBytes) {
    return absl::DataLossError(absl::StrCat(path, " is ", st.st_size, " bytes, over the limit of ",
                                            kFingerprintMaxConfigBytes));
  }
  std::string bytes;
  if (absl::Status s = ReadExactly(fd.get(), path, 0, st.st_size, &bytes); !s.ok()) return s;
  hasher->UpdateString(bytes);
  return absl::OkStatus();
}

}  // namespace

const char* OffloadKindName(OffloadKind kind) {
  switch (kind) {
    case OffloadKind::kLatentBlock:
      return "latent_block";
    case OffloadKind::kKdaCheckpoint:
      return "kda_checkpoint";
  }
  return "unknown";
}

bool IsOffloadKind(uint8_t value) {
  return value == static_cast<uint8_t>(OffloadKind::kLatentBlock) ||
         value == static_cast<uint8_t>(OffloadKind::kKdaCheckpoint);
}

absl::Status ValidateOffloadIdentity(const OffloadIdentity& identity) {
  auto bad = [](absl::string_view field, auto value, absl::string_view limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv offload identity: ", field, " is ", value, ", must be ", limit));
  };
  if (identity.checkpoint_fingerprint.empty()) {
    return bad("checkpoint_fingerprint", "empty", "non-empty");
  }
  if (identity.cache_dtype.empty()) return bad("cache_dtype", "empty", "non-empty");
  if (identity.block_size < 1) return bad("block_size", identity.block_size, ">= 1");
  if (identity.tensor_parallel_size < 1) {
    return bad("tensor_parallel_size", identity.tensor_parallel_size, ">= 1");
  }
  if (identity.tensor_parallel_rank < 0 ||
      identity.tensor_parallel_rank >= identity.tensor_parallel_size) {
    return bad("tensor_parallel_rank", identity.tensor_parallel_rank,
               absl::StrCat("in [0, ", identity.tensor_parallel_size, ")"));
  }
  if (identity.context_parallel_size < 1) {
    return bad("context_parallel_size", identity.context_parallel_size, ">= 1");
  }
  if (identity.context_parallel_rank < 0 ||
      identity.context_parallel_rank >= identity.context_parallel_size) {
    return bad("context_parallel_rank", identity.context_parallel_rank,
               absl::StrCat("in [0, ", identity.context_parallel_size, ")"));
  }
  return absl::OkStatus();
}

uint64_t OffloadIdentityFingerprint(const OffloadIdentity& identity) {
  ContentHasher hasher;
  hasher.UpdateU64(kOffloadFormatVersion);
  hasher.UpdateString(identity.checkpoint_fingerprint);
  hasher.UpdateString(identity.cache_dtype);
  for (int value :
       {identity.block_size, identity.tensor_parallel_size, identity.tensor_parallel_rank,
        identity.context_parallel_size, identity.context_parallel_rank}) {
    hasher.UpdateU64(static_cast<uint64_t>(static_cast<int64_t>(value)));
  }
  return hasher.Hash64();
}

absl::StatusOr<std::string> CheckpointFingerprint(const std::string& model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat("kv offload: cannot fingerprint checkpoint ", model_dir, ": not a directory"));
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(model_dir, ec)) {
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) files.push_back(e.path());
  }
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("kv offload: cannot list checkpoint ", model_dir, ": ", ec.message()));
  }
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat("kv offload: cannot fingerprint checkpoint ", model_dir,
                                            ": it has no *.safetensors file"));
  }
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  ContentHasher hasher;
  if (absl::Status s = HashConfig(model_dir, &hasher); !s.ok()) return s;
  hasher.UpdateU64(files.size());
  for (const fs::path& file : files) {
    if (absl::Status s = HashSafetensorsFile(file, &hasher); !s.ok()) return s;
  }
  return hasher.Hash128Hex();
}

}  // namespace strata::kvcache
