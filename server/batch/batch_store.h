// The directory that keeps what the Files and Batches APIs accepted across restarts (`strata
// serve --files-dir DIR`):
//
//   DIR/lock                      flock'ed by the server using DIR: a second one is refused
//   DIR/files/ID.data             a file's bytes, written before ...
//   DIR/files/ID.json             ... its record {"id", "filename", "purpose", "created_at",
//                                 "seq", "bytes"}: a file without a record was never accepted
//   DIR/batches/ID.json           a batch's record (its API object and "seq"; no credentials)
//   DIR/batches/ID.output.jsonl   a running batch's lines so far: answered requests ...
//   DIR/batches/ID.errors.jsonl   ... and the others, in input order, flushed line by line
//
// Records and data are written to a temporary name, fsynced and renamed, so a crash leaves the
// old version or the new one, never half of one. Thread-safe for different ids; the callers
// serialise writes of one id.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "core/durable_file.h"
#include "server/batch/file_store.h"

namespace strata::batch {

class BatchStore {
 public:
  // Creates DIR and its subdirectories where missing and takes its lock. FailedPrecondition
  // when another process holds it; the OS's error, naming the path, when DIR is unusable.
  static absl::StatusOr<std::unique_ptr<BatchStore>> Open(const std::string& dir);
  ~BatchStore();  // releases the lock
  BatchStore(const BatchStore&) = delete;
  BatchStore& operator=(const BatchStore&) = delete;

  const std::string& dir() const { return dir_; }

  // The file's bytes, then its record. An error (the disk full, ...) names the path; nothing of
  // the file is left.
  absl::Status PutFile(const StoredFile& file, int64_t seq);
  void RemoveFile(const std::string& id);
  // The files whose record and bytes agree, in `seq` order (seq into each .second). A broken
  // one is named in a warning and left on disk; bytes without a record (an upload the process
  // died writing) are removed.
  std::vector<std::pair<StoredFile, int64_t>> LoadFiles() const;

  absl::Status PutBatch(const std::string& id, const nlohmann::ordered_json& record);
  // Every readable batch record whose "id" names its file (another one is named in a warning
  // and skipped).
  std::vector<nlohmann::ordered_json> LoadBatches() const;
  // DIR/batches/ID.KIND.jsonl; kind "output" or "errors".
  std::string LinesPath(const std::string& batch_id, const char* kind) const;
  void RemoveLines(const std::string& batch_id);

 private:
  BatchStore(std::string dir, std::unique_ptr<DirectoryLock> lock)
      : dir_(std::move(dir)), lock_(std::move(lock)) {}

  const std::string dir_;
  const std::unique_ptr<DirectoryLock> lock_;
};

// Counts the whole lines of the file at `path` (0 when it does not exist) and cuts off a last
// line without its newline (a write the process died in). The OS's error naming the path.
absl::StatusOr<int64_t> CountAndTrimLines(const std::string& path);

}  // namespace strata::batch
