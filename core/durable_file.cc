// durable_file.h: temporary name + rename writes, records, the directory lock.
#include "core/durable_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/file.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

absl::Status OsError(const std::string& what, const std::string& path, int error) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(error)));
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes, bool fsync) {
  return WriteFileAtomically(path, std::span<const std::string_view>(&bytes, 1), fsync);
}

absl::Status WriteFileAtomically(const std::string& path, std::span<const std::string_view> parts,
                                 bool fsync) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return OsError("cannot create", tmp, errno);
  for (const std::string_view bytes : parts) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int error = n < 0 ? errno : EIO;
        ::close(fd);
        ::unlink(tmp.c_str());
        return OsError("cannot write", tmp, error);
      }
      done += static_cast<size_t>(n);
    }
  }
  if ((fsync && ::fsync(fd) != 0) || ::close(fd) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    return OsError("cannot write", tmp, error);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    return OsError("cannot rename to", path, error);
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::ordered_json> ReadJsonObjectFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  nlohmann::ordered_json record =
      nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded() || !record.is_object()) {
    return absl::DataLossError(absl::StrCat(path, " is not a JSON object"));
  }
  return record;
}

std::vector<std::string> ListFilesEnding(const std::string& dir, std::string_view suffix) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::string path = e.path().string();
    if (path.ends_with(suffix)) paths.push_back(std::move(path));
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

void RemoveFilesEnding(const std::string& dir, std::string_view suffix) {
  for (const std::string& path : ListFilesEnding(dir, suffix)) ::unlink(path.c_str());
}

absl::StatusOr<std::unique_ptr<DirectoryLock>> DirectoryLock::Acquire(
    const std::string& dir, const std::vector<std::string>& subdirs, const char* flag) {
  std::vector<std::string> dirs = {dir};
  for (const std::string& sub : subdirs) dirs.push_back(absl::StrCat(dir, "/", sub));
  for (const std::string& d : dirs) {
    std::error_code ec;
    const bool existed = fs::exists(d, ec);
    fs::create_directories(d, ec);
    // A directory we create holds request and response data: the owner's only, as its files
    // are (0600). One the operator made keeps the permissions they gave it.
    if (!ec && !existed) fs::permissions(d, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": cannot create ", d, ": ", ec.message()));
    }
  }
  const std::string lock_path = dir + "/lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return OsError(absl::StrCat(flag, ": cannot open"), lock_path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat(flag, " ", dir,
                       " is in use by another process (one server per directory: give each "
                       "its own)"));
    }
    return OsError(absl::StrCat(flag, ": cannot lock"), lock_path, error);
  }
  return std::unique_ptr<DirectoryLock>(new DirectoryLock(fd));
}

DirectoryLock::~DirectoryLock() { ::close(fd_); }  // closing releases the flock

}  // namespace strata
