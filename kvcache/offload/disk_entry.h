// One disk tier entry: its file name and its file format (docs/kv-offload.md "File format").
//
//   DIR/<subdir>/<identity:016x>-<kind>-<hash:016x>.kvo     subdir = 2 hex digits, hash >> 56
//
//   offset  bytes  field (little-endian)
//        0      8  magic "STRKVOFF"
//        8      4  format version (kOffloadFormatVersion)
//       12      1  kind (OffloadKind)
//       13      3  zero
//       16      8  identity fingerprint (OffloadIdentityFingerprint)
//       24      8  key hash (BlockHash)
//       32      8  payload bytes
//       40      8  payload checksum (ContentHash64 of the payload)
//       48      8  zero
//       56      8  header checksum (ContentHash64 of bytes [0, 56))
//       64      …  payload
//
// A file is written whole or not at all (a `.tmp` sibling renamed over it). Reading checks every
// header field against what the reader expects and the payload against its checksum, so a
// truncated, zeroed, swapped or foreign file is an error, never wrong bytes.
#pragma once

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvcache/offload/offload_key.h"

namespace strata::kvcache {

inline constexpr int64_t kDiskEntryHeaderBytes = 64;
inline constexpr std::string_view kDiskEntryMagic = "STRKVOFF";
inline constexpr std::string_view kDiskEntrySuffix = ".kvo";
inline constexpr int kDiskEntryNumSubdirs = 256;

struct DiskEntryHeader {
  uint32_t format_version = kOffloadFormatVersion;
  OffloadKind kind = OffloadKind::kLatentBlock;
  uint64_t identity_fingerprint = 0;
  BlockHash key_hash = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
};

// The 64 header bytes.
std::string EncodeDiskEntryHeader(const DiskEntryHeader& header);
// The header in the first kDiskEntryHeaderBytes of `bytes`; DataLoss naming `path` and the field
// for a short header, a bad magic, another format version, a bad header checksum or an unknown
// kind.
absl::StatusOr<DiskEntryHeader> DecodeDiskEntryHeader(std::string_view bytes,
                                                      const std::string& path);

// "ab" for the subdirectory of `key` (its hash's top byte).
std::string DiskEntrySubdir(const OffloadKey& key);
// The entry's file name (without its subdirectory).
std::string DiskEntryFileName(uint64_t identity_fingerprint, const OffloadKey& key);

struct ParsedDiskEntryName {
  uint64_t identity_fingerprint = 0;
  OffloadKey key;
};
// The parts of a DiskEntryFileName, or nullopt for any other name.
std::optional<ParsedDiskEntryName> ParseDiskEntryFileName(std::string_view name);

// Writes the entry to `path` atomically. Internal error naming the path and the OS's reason.
absl::Status WriteDiskEntry(const std::string& path, uint64_t identity_fingerprint,
                            const OffloadKey& key, std::string_view payload, bool fsync);

// What a scan learns from a file's header alone.
struct DiskEntryFileInfo {
  DiskEntryHeader header;
  int64_t file_bytes = 0;
  timespec mtime{};
};
// Reads and checks the header of `path` (not the payload): DataLoss naming the path and the
// reason when the header is bad, belongs to another identity or key than expected, or the file's
// size is not header + payload bytes; NotFound when it cannot be opened.
absl::StatusOr<DiskEntryFileInfo> ReadDiskEntryHeader(const std::string& path,
                                                      uint64_t identity_fingerprint,
                                                      const OffloadKey& key);

// Reads the whole entry and checks it as ReadDiskEntryHeader does, plus the payload size
// (`expected_payload_bytes`) and checksum: the payload, or DataLoss / NotFound naming the path.
// On success the file's mtime is set to now (the disk tier's LRU order after a restart).
absl::StatusOr<std::string> ReadDiskEntry(const std::string& path, uint64_t identity_fingerprint,
                                          const OffloadKey& key, int64_t expected_payload_bytes);

}  // namespace strata::kvcache
