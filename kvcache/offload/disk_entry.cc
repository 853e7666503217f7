// disk_entry.h: entry file names, header encoding, checked reads and atomic writes.
#include "kvcache/offload/disk_entry.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/durable_file.h"
#include "core/file.h"
#include "kvcache/offload/content_hash.h"

namespace strata::kvcache {
namespace {

// Byte offsets of the header fields (disk_entry.h).
constexpr int kVersionOffset = 8;
constexpr int kKindOffset = 12;
constexpr int kIdentityOffset = 16;
constexpr int kKeyHashOffset = 24;
constexpr int kPayloadBytesOffset = 32;
constexpr int kPayloadChecksumOffset = 40;
constexpr int kHeaderChecksumOffset = 56;

void PutLittleEndian(uint64_t value, int num_bytes, char* out) {
  for (int i = 0; i < num_bytes; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t GetLittleEndian(const char* in, int num_bytes) {
  uint64_t value = 0;
  for (int i = num_bytes - 1; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(in[i]);
  return value;
}

// Reads `size` bytes at `offset` into `out`; DataLoss naming the path on a short read.
absl::Status ReadAt(int fd, const std::string& path, int64_t offset, int64_t size, char* out) {
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, static_cast<size_t>(size - done),
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::DataLossError(absl::StrCat("kv offload entry ", path, ": cannot read ", size,
                                              " bytes at offset ", offset, ": ",
                                              n < 0 ? std::strerror(errno) : "file truncated"));
    }
    done += n;
  }
  return absl::OkStatus();
}

absl::Status Corrupt(const std::string& path, absl::string_view why) {
  return absl::DataLossError(absl::StrCat("kv offload entry ", path, ": ", why));
}

// Reads the header of the open file and checks it against the expected identity and key and
// the file's size.
absl::StatusOr<DiskEntryFileInfo> ReadCheckedHeader(int fd, const std::string& path,
                                                    uint64_t identity_fingerprint,
                                                    const OffloadKey& key) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return absl::DataLossError(
        absl::StrCat("kv offload entry ", path, ": cannot stat: ", std::strerror(errno)));
  }
  std::array<char, kDiskEntryHeaderBytes> bytes;
  if (st.st_size < kDiskEntryHeaderBytes) {
    return Corrupt(path, absl::StrCat("file of ", st.st_size, " bytes is shorter than the ",
                                      kDiskEntryHeaderBytes, "-byte header (truncated)"));
  }
  if (absl::Status s = ReadAt(fd, path, 0, kDiskEntryHeaderBytes, bytes.data()); !s.ok()) return s;
  absl::StatusOr<DiskEntryHeader> header =
      DecodeDiskEntryHeader(std::string_view(bytes.data(), bytes.size()), path);
  if (!header.ok()) return header.status();
  if (header->identity_fingerprint != identity_fingerprint) {
    return Corrupt(path, absl::StrFormat("identity fingerprint %016x, expected %016x",
                                         header->identity_fingerprint, identity_fingerprint));
  }
  if (header->key_hash != key.hash || header->kind != key.kind) {
    return Corrupt(
        path, absl::StrFormat("holds key %016x/%s, its name says %016x/%s", header->key_hash,
                              OffloadKindName(header->kind), key.hash, OffloadKindName(key.kind)));
  }
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (header->payload_bytes != file_bytes - kDiskEntryHeaderBytes) {
    return Corrupt(
        path, absl::StrCat("file is ", file_bytes, " bytes, header says ", kDiskEntryHeaderBytes,
                           " + ", header->payload_bytes, " (truncated or extended)"));
  }
  return DiskEntryFileInfo{*header, st.st_size, st.st_mtim};
}

}  // namespace

std::string EncodeDiskEntryHeader(const DiskEntryHeader& header) {
  std::string bytes(kDiskEntryHeaderBytes, '\0');
  std::memcpy(bytes.data(), kDiskEntryMagic.data(), kDiskEntryMagic.size());
  PutLittleEndian(header.format_version, 4, bytes.data() + kVersionOffset);
  bytes[kKindOffset] = static_cast<char>(header.kind);
  PutLittleEndian(header.identity_fingerprint, 8, bytes.data() + kIdentityOffset);
  PutLittleEndian(header.key_hash, 8, bytes.data() + kKeyHashOffset);
  PutLittleEndian(header.payload_bytes, 8, bytes.data() + kPayloadBytesOffset);
  PutLittleEndian(header.payload_checksum, 8, bytes.data() + kPayloadChecksumOffset);
  const uint64_t checksum = ContentHash64(std::string_view(bytes.data(), kHeaderChecksumOffset));
  PutLittleEndian(checksum, 8, bytes.data() + kHeaderChecksumOffset);
  return bytes;
}

absl::StatusOr<DiskEntryHeader> DecodeDiskEntryHeader(std::string_view bytes,
                                                      const std::string& path) {
  if (bytes.size() < static_cast<size_t>(kDiskEntryHeaderBytes)) {
    return Corrupt(
        path, absl::StrCat("header of ", bytes.size(), " bytes, expected ", kDiskEntryHeaderBytes));
  }
  if (bytes.substr(0, kDiskEntryMagic.size()) != kDiskEntryMagic) {
    return Corrupt(path, "bad magic (not a Strata kv offload entry)");
  }
  const uint64_t checksum = ContentHash64(bytes.substr(0, kHeaderChecksumOffset));
  if (GetLittleEndian(bytes.data() + kHeaderChecksumOffset, 8) != checksum) {
    return Corrupt(path, "header checksum mismatch");
  }
  DiskEntryHeader header;
  header.format_version = static_cast<uint32_t>(GetLittleEndian(bytes.data() + kVersionOffset, 4));
  if (header.format_version != kOffloadFormatVersion) {
    return Corrupt(path, absl::StrCat("format version ", header.format_version, ", expected ",
                                      kOffloadFormatVersion));
  }
  const uint8_t kind = static_cast<uint8_t>(bytes[kKindOffset]);
  if (!IsOffloadKind(kind)) return Corrupt(path, absl::StrCat("unknown kind ", kind));
  header.kind = static_cast<OffloadKind>(kind);
  header.identity_fingerprint = GetLittleEndian(bytes.data() + kIdentityOffset, 8);
  header.key_hash = GetLittleEndian(bytes.data() + kKeyHashOffset, 8);
  header.payload_bytes = GetLittleEndian(bytes.data() + kPayloadBytesOffset, 8);
  header.payload_checksum = GetLittleEndian(bytes.data() + kPayloadChecksumOffset, 8);
  return header;
}

std::string DiskEntrySubdir(const OffloadKey& key) {
  return absl::StrFormat("%02x", static_cast<unsigned>(key.hash >> 56));
}

std::string DiskEntryFileName(uint64_t identity_fingerprint, const OffloadKey& key) {
  return absl::StrFormat("%016x-%d-%016x%s", identity_fingerprint, static_cast<int>(key.kind),
                         key.hash, kDiskEntrySuffix);
}

std::optional<ParsedDiskEntryName> ParseDiskEntryFileName(std::string_view name) {
  // 16 + 1 + 1 + 1 + 16 characters, then the suffix.
  constexpr size_t kStemSize = 35;
  if (name.size() != kStemSize + kDiskEntrySuffix.size() || !name.ends_with(kDiskEntrySuffix) ||
      name[16] != '-' || name[18] != '-') {
    return std::nullopt;
  }
  auto parse_hex = [](std::string_view digits, uint64_t* value) {
    for (char c : digits) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) || absl::ascii_isupper(c)) {
        return false;
      }
    }
    return absl::SimpleHexAtoi(absl::string_view(digits.data(), digits.size()), value);
  };
  ParsedDiskEntryName parsed;
  uint64_t hash = 0;
  const uint8_t kind = static_cast<uint8_t>(name[17] - '0');
  if (!parse_hex(name.substr(0, 16), &parsed.identity_fingerprint) ||
      !parse_hex(name.substr(19, 16), &hash) || !IsOffloadKind(kind)) {
    return std::nullopt;
  }
  parsed.key = OffloadKey{hash, static_cast<OffloadKind>(kind)};
  return parsed;
}

absl::Status WriteDiskEntry(const std::string& path, uint64_t identity_fingerprint,
                            const OffloadKey& key, std::string_view payload, bool fsync) {
  DiskEntryHeader header;
  header.kind = key.kind;
  header.identity_fingerprint = identity_fingerprint;
  header.key_hash = key.hash;
  header.payload_bytes = payload.size();
  header.payload_checksum = ContentHash64(payload);
  const std::string header_bytes = EncodeDiskEntryHeader(header);
  const std::array<std::string_view, 2> parts = {header_bytes, payload};
  return WriteFileAtomically(path, parts, fsync);
}

absl::StatusOr<DiskEntryFileInfo> ReadDiskEntryHeader(const std::string& path,
                                                      uint64_t identity_fingerprint,
                                                      const OffloadKey& key) {
  const ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::NotFoundError(
        absl::StrCat("kv offload entry ", path, ": cannot open: ", std::strerror(errno)));
  }
  return ReadCheckedHeader(fd.get(), path, identity_fingerprint, key);
}

absl::StatusOr<std::string> ReadDiskEntry(const std::string& path, uint64_t identity_fingerprint,
                                          const OffloadKey& key, int64_t expected_payload_bytes) {
  const ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::NotFoundError(
        absl::StrCat("kv offload entry ", path, ": cannot open: ", std::strerror(errno)));
  }
  absl::StatusOr<DiskEntryFileInfo> info =
      ReadCheckedHeader(fd.get(), path, identity_fingerprint, key);
  if (!info.ok()) return info.status();
  if (info->header.payload_bytes != static_cast<uint64_t>(expected_payload_bytes)) {
    return Corrupt(path, absl::StrCat("payload of ", info->header.payload_bytes,
                                      " bytes, the index says ", expected_payload_bytes));
  }
  std::string payload(static_cast<size_t>(expected_payload_bytes), '\0');
  if (absl::Status s =
          ReadAt(fd.get(), path, kDiskEntryHeaderBytes, expected_payload_bytes, payload.data());
      !s.ok()) {
    return s;
  }
  if (ContentHash64(payload) != info->header.payload_checksum) {
    return Corrupt(path, "payload checksum mismatch");
  }
  ::futimens(fd.get(), nullptr);  // best effort: only the LRU order after a restart depends on it
  return payload;
}

}  // namespace strata::kvcache
