// Whole-file reads for the small text files a checkpoint and the flags name (config.json,
// tokenizer files, generation_config.json, placement files).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace strata {

// The file's bytes. NotFound "cannot open PATH" when it cannot be opened, DataLoss "cannot read
// PATH" on a read error.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Whether `path` can be opened for reading.
bool FileExists(const std::string& path);

// Closes a file descriptor (>= 0) when it goes out of scope.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  const int fd_;
};

}  // namespace strata
