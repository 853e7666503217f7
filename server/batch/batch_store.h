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
// old version or the new one, never half of one. Every file is 0600 whatever the umask (the
// users' prompts and outputs). Thread-safe for different ids; the callers
// serialise writes of one id.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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

// What an earlier run of a batch left in its line files, checked before a run carries on.
struct KeptLines {
  int64_t answered = 0;  // lines kept in the output file
  int64_t failed = 0;    // lines kept in the error file
  int64_t dropped = 0;   // lines removed from either
  // By request index: its line is kept (the request is not sent again); empty when none is.
  std::vector<bool> written;
};

// Keeps the lines of the batch's line files (`output_path`: answers, `errors_path`: the rest)
// that CheckOutputLine (batch_line.h) accepts for the requests of `input` (the batch's input
// file, parsed only when a line file has lines), the first of a request written twice; drops
// the others — a torn last line (a write the
// process died in), a line that is not JSON or not one of this input's requests, a repeat —
// each named in a warning, so that their requests run again. A file that loses lines is
// rewritten whole (temporary name + rename). Both files exist afterwards, mode 0600 whatever
// the umask (batch output is the users' data, as the rest of the directory). The OS's error
// naming the path.
absl::StatusOr<KeptLines> KeepValidLines(const std::string& output_path,
                                         const std::string& errors_path, std::string_view id_prefix,
                                         std::string_view input);

}  // namespace strata::batch
