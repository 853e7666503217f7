// The files of OpenAI's Files API as Strata serves them (POST /v1/files and friends): batch
// input files uploaded by clients and the output / error files batches write. Kept in memory for
// the life of the process, within a byte budget (`--files-store-bytes`): a file that would pass
// it is refused, never an older one dropped (a batch's input and output stay until deleted).
// Thread-safe.
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

class FileStore {
 public:
  explicit FileStore(int64_t capacity_bytes);

  // ResourceExhausted naming the sizes when the file does not fit the budget.
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
  mutable std::mutex mu_;
  std::map<std::string, StoredFile> files_;  // guarded by mu_
  std::vector<std::string> order_;           // ids by creation; guarded by mu_
  int64_t bytes_ = 0;                        // guarded by mu_
};

}  // namespace strata::batch
