// Files a server keeps what it accepted in, so a restart or a crash loses none of it: whole-file
// writes that leave the old version or the new one (never half of one), JSON records read back,
// and the lock that keeps a directory to one process (server/batch/batch_store.h,
// server/frontend/response_store.h).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace strata {

// Writes `bytes` to `path` whole or not at all: a temporary file (`path`.tmp) renamed over it.
// With `fsync` the bytes are on the disk before the rename (they outlive a power loss); without,
// they outlive the process dying at any point (the kernel has them) at a fraction of the cost.
// An error names the path and the OS's reason; nothing of the write is left then.
absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes, bool fsync);
// The same for a file whose bytes are `parts` one after another (a header and a payload written
// without first joining them).
absl::Status WriteFileAtomically(const std::string& path, std::span<const std::string_view> parts,
                                 bool fsync);

// The JSON object in `path`; NotFound / DataLoss naming the path when it cannot be read or is
// not a JSON object.
absl::StatusOr<nlohmann::ordered_json> ReadJsonObjectFile(const std::string& path);

// The paths of the entries of `dir` whose names end in `suffix`, sorted (none when `dir` cannot
// be read).
std::vector<std::string> ListFilesEnding(const std::string& dir, std::string_view suffix);

// Removes the entries of `dir` whose names end in `suffix` (WriteFileAtomically's temporaries
// that a crash left: call with the directory's lock held).
void RemoveFilesEnding(const std::string& dir, std::string_view suffix);

// An exclusive flock on DIR/lock, held while the object lives.
class DirectoryLock {
 public:
  // Creates `dir` and each of `subdirs` in it where missing, then takes the lock.
  // FailedPrecondition "`flag` DIR is in use by another process" when another process holds it;
  // InvalidArgument / Internal naming `flag` and the path when the directory is unusable.
  static absl::StatusOr<std::unique_ptr<DirectoryLock>> Acquire(
      const std::string& dir, const std::vector<std::string>& subdirs, const char* flag);
  ~DirectoryLock();  // releases the lock
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  const int fd_;
};

}  // namespace strata
