// batch_store.h: the directory layout, atomic writes and loading.
#include "server/batch/batch_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/durable_file.h"
#include "core/file.h"
#include "core/log.h"
#include "core/status.h"
#include "server/batch/batch_line.h"

namespace strata::batch {
namespace {

namespace fs = std::filesystem;

absl::Status OsError(const char* what, const std::string& path, int error) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(error)));
}

// Files and batch records are acceptances: on the disk before they are answered.
absl::Status WriteAtomically(const std::string& path, std::string_view bytes) {
  return WriteFileAtomically(path, bytes, /*fsync=*/true);
}

// record[key] as a T when it holds one.
template <typename T>
bool Get(const nlohmann::ordered_json& record, const char* key, T* out) {
  auto it = record.find(key);
  if (it == record.end()) return false;
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return false;
  } else {
    if (!it->is_number_integer()) return false;
  }
  *out = it->get<T>();
  return true;
}

// The text of the line file at `path`, created empty where missing; private (0600) either way.
absl::StatusOr<std::string> ReadPrivateFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return OsError("cannot open", path, errno);
  const int chmod_error = ::fchmod(fd, 0600) == 0 ? 0 : errno;  // one made 0644 before
  ::close(fd);
  if (chmod_error != 0) return OsError("cannot make private", path, chmod_error);
  return ReadFileToString(path);
}

// How many lines of the line file `path` (its `text`) CheckOutputLine accepts (a request
// kept->written marks already is a repeat); marks their requests. The file is rewritten when a
// line is dropped.
absl::StatusOr<int64_t> KeepFileLines(const std::string& path, const std::string& text,
                                      std::string_view id_prefix,
                                      const std::vector<std::optional<std::string>>& custom_ids,
                                      bool answered, KeptLines* kept) {
  std::string good;
  int64_t lines = 0, dropped = 0, line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const std::string_view line =
        std::string_view(text).substr(start, end == std::string::npos ? end : end - start);
    start = end == std::string::npos ? text.size() : end + 1;
    ++line_number;
    absl::StatusOr<int64_t> index =
        end == std::string::npos ? absl::DataLossError("no newline ends it (a write cut short)")
                                 : CheckOutputLine(line, id_prefix, custom_ids, answered);
    if (index.ok() && kept->written[static_cast<size_t>(*index)]) {
      index = absl::AlreadyExistsError(absl::StrCat("request ", *index, " was written before"));
    }
    if (!index.ok()) {
      LOG_WARN("batch", "{} line {} dropped, its request runs again: {}", path, line_number,
               std::string(index.status().message()));
      ++dropped;
      continue;
    }
    kept->written[static_cast<size_t>(*index)] = true;
    good.append(line);
    good.push_back('\n');
    ++lines;
  }
  if (dropped > 0) RETURN_IF_ERROR(WriteAtomically(path, good));
  kept->dropped += dropped;
  return lines;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BatchStore>> BatchStore::Open(const std::string& dir) {
  ASSIGN_OR_RETURN(std::unique_ptr<DirectoryLock> lock,
                   DirectoryLock::Acquire(dir, {"files", "batches"}, "--files-dir"));
  // Writes a crash cut short: the old version stands.
  for (const char* sub : {"/files", "/batches"}) RemoveFilesEnding(dir + sub, ".tmp");
  return std::unique_ptr<BatchStore>(new BatchStore(dir, std::move(lock)));
}

BatchStore::~BatchStore() = default;

absl::Status BatchStore::PutFile(const StoredFile& file, int64_t seq) {
  const std::string base = absl::StrCat(dir_, "/files/", file.id);
  RETURN_IF_ERROR(WriteAtomically(base + ".data", *file.content));
  const nlohmann::ordered_json record = {{"id", file.id},
                                         {"filename", file.filename},
                                         {"purpose", file.purpose},
                                         {"created_at", file.created_at},
                                         {"seq", seq},
                                         {"bytes", file.content->size()}};
  absl::Status written = WriteAtomically(base + ".json", record.dump());
  if (!written.ok()) ::unlink((base + ".data").c_str());
  return written;
}

void BatchStore::RemoveFile(const std::string& id) {
  const std::string base = absl::StrCat(dir_, "/files/", id);
  // The record first: bytes without one are removed at the next start.
  for (const std::string& path : {base + ".json", base + ".data"}) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      LOG_WARN("batch", "cannot remove {}: {}", path, std::strerror(errno));
    }
  }
}

std::vector<std::pair<StoredFile, int64_t>> BatchStore::LoadFiles() const {
  std::vector<std::pair<StoredFile, int64_t>> files;
  const std::string dir = dir_ + "/files";
  for (const std::string& path : ListFilesEnding(dir, ".json")) {
    absl::StatusOr<nlohmann::ordered_json> record = ReadJsonObjectFile(path);
    StoredFile file;
    int64_t seq = 0, bytes = 0;
    if (!record.ok() || !Get(*record, "id", &file.id) ||
        !Get(*record, "filename", &file.filename) || !Get(*record, "purpose", &file.purpose) ||
        !Get(*record, "created_at", &file.created_at) || !Get(*record, "seq", &seq) ||
        !Get(*record, "bytes", &bytes) || path != absl::StrCat(dir, "/", file.id, ".json")) {
      LOG_WARN("batch", "--files-dir: skipping {}: {}", path,
               record.ok() ? "not a file record" : record.status().ToString());
      continue;
    }
    absl::StatusOr<std::string> data = ReadFileToString(absl::StrCat(dir, "/", file.id, ".data"));
    if (!data.ok() || static_cast<int64_t>(data->size()) != bytes) {
      LOG_WARN("batch", "--files-dir: skipping file {}: {}", file.id,
               data.ok() ? absl::StrCat("its data holds ", data->size(), " bytes, its record says ",
                                        bytes)
                         : data.status().ToString());
      continue;
    }
    file.content = std::make_shared<const std::string>(*std::move(data));
    files.emplace_back(std::move(file), seq);
  }
  for (const std::string& path : ListFilesEnding(dir, ".data")) {
    if (!fs::exists(path.substr(0, path.size() - 5) + ".json")) {
      LOG_INFO("batch", "--files-dir: removing {}: an upload never accepted", path);
      ::unlink(path.c_str());
    }
  }
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  return files;
}

absl::Status BatchStore::PutBatch(const std::string& id, const nlohmann::ordered_json& record) {
  return WriteAtomically(absl::StrCat(dir_, "/batches/", id, ".json"), record.dump());
}

std::vector<nlohmann::ordered_json> BatchStore::LoadBatches() const {
  std::vector<nlohmann::ordered_json> batches;
  for (const std::string& path : ListFilesEnding(dir_ + "/batches", ".json")) {
    absl::StatusOr<nlohmann::ordered_json> record = ReadJsonObjectFile(path);
    std::string id;
    if (record.ok() &&
        !(Get(*record, "id", &id) && path == absl::StrCat(dir_, "/batches/", id, ".json"))) {
      record = absl::DataLossError("its \"id\" does not name the file");
    }
    if (!record.ok()) {
      LOG_WARN("batch", "--files-dir: skipping {}: {}", path, record.status().ToString());
      continue;
    }
    batches.push_back(*std::move(record));
  }
  return batches;
}

std::string BatchStore::LinesPath(const std::string& batch_id, const char* kind) const {
  return absl::StrCat(dir_, "/batches/", batch_id, ".", kind, ".jsonl");
}

void BatchStore::RemoveLines(const std::string& batch_id) {
  for (const char* kind : {"output", "errors"}) {
    const std::string path = LinesPath(batch_id, kind);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      LOG_WARN("batch", "cannot remove {}: {}", path, std::strerror(errno));
    }
  }
}

absl::StatusOr<KeptLines> KeepValidLines(const std::string& output_path,
                                         const std::string& errors_path, std::string_view id_prefix,
                                         std::string_view input) {
  ASSIGN_OR_RETURN(const std::string output, ReadPrivateFile(output_path));
  ASSIGN_OR_RETURN(const std::string errors, ReadPrivateFile(errors_path));
  KeptLines kept;
  if (output.empty() && errors.empty()) return kept;  // a batch's first run
  const std::vector<std::optional<std::string>> custom_ids = RequestCustomIds(input);
  kept.written.assign(custom_ids.size(), false);
  ASSIGN_OR_RETURN(kept.answered, KeepFileLines(output_path, output, id_prefix, custom_ids,
                                                /*answered=*/true, &kept));
  ASSIGN_OR_RETURN(kept.failed, KeepFileLines(errors_path, errors, id_prefix, custom_ids,
                                              /*answered=*/false, &kept));
  return kept;
}

}  // namespace strata::batch
