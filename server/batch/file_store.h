// The files of OpenAI's Files API as Strata serves them (POST /v1/files and friends): batch
// input files uploaded by clients and the output / error files batches write. Kept in memory,
// within a byte budget (`--files-store-memory`): a file that would pass it is refused, never an
// older one dropped (a batch's input and output stay until deleted). With a BatchStore
// (`--files-dir`) each file is also on disk before it is accepted, and the files there are
// loaded at start. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::batch {

struct StoredFile {
  std::string id;  // "file-" + 32 hex digits
  std::string filename;
  std::string purpose;     // "batch" (uploads), "batch_output" (what batches write), …
  int64_t created_at = 0;  // Unix seconds
  std::shared_ptr<const std::string> content;
};

class BatchStore;

class FileStore {
 public:
  // `disk`: null (memory only), or the directory whose files this store loads now — also those
  // past the budget: they were accepted (new ones are refused until deletes make room) — and
  // writes from now on; it must outlive the store.
  FileStore(int64_t capacity_bytes, BatchStore* disk);

  // ResourceExhausted naming the sizes when the file does not fit the budget; the disk's error
  // when it cannot be written there.
  absl::StatusOr<StoredFile> Add(std::string filename, std::string purpose, std::string content);
  std::optional<StoredFile> Get(const std::string& id) const;
  // Oldest first.
  std::vector<StoredFile> List() const;
  bool Delete(const std::string& id);

  int64_t capacity_bytes() const { return capacity_bytes_; }
  int64_t num_bytes() const;
  int64_t num_files() const;

 private:
  const int64_t capacity_bytes_;
  BatchStore* const disk_;
  mutable std::mutex mu_;
  int64_t next_seq_ = 0;                     // the creation order of the next file; guarded by mu_
  std::map<std::string, StoredFile> files_;  // guarded by mu_
  std::vector<std::string> order_;           // ids by creation; guarded by mu_
  int64_t bytes_ = 0;                        // guarded by mu_
};

}  // namespace strata::batch
