// file_store.h
#include "server/batch/file_store.h"

#include <algorithm>
#include <ctime>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "server/batch/batch_store.h"
#include "server/frontend/generation_response.h"

namespace strata::batch {

FileStore::FileStore(int64_t capacity_bytes, BatchStore* disk)
    : capacity_bytes_(capacity_bytes), disk_(disk) {
  if (disk_ == nullptr) return;
  for (auto& [file, seq] : disk_->LoadFiles()) {
    bytes_ += static_cast<int64_t>(file.content->size());
    next_seq_ = std::max(next_seq_, seq + 1);
    order_.push_back(file.id);
    files_.emplace(file.id, std::move(file));
  }
  if (!files_.empty()) {
    LOG_INFO("batch", "{} files ({} bytes) loaded from {}", files_.size(), bytes_, disk_->dir());
  }
  if (bytes_ > capacity_bytes_) {
    LOG_WARN("batch",
             "the files in {} hold {} bytes, past --files-store-memory {}: uploads are refused "
             "until deletes make room",
             disk_->dir(), bytes_, capacity_bytes_);
  }
}

absl::StatusOr<StoredFile> FileStore::Add(std::string filename, std::string purpose,
                                          std::string content) {
  const auto size = static_cast<int64_t>(content.size());
  StoredFile file{frontend::NewResponseId("file"), std::move(filename), std::move(purpose),
                  static_cast<int64_t>(std::time(nullptr)),
                  std::make_shared<const std::string>(std::move(content))};
  int64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes_ + size > capacity_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the file store is full: ", size, " bytes do not fit beside the ", bytes_,
          " stored (--files-store-memory ", capacity_bytes_, "); delete files no longer needed"));
    }
    bytes_ += size;  // held while the disk is written (outside the lock)
    seq = next_seq_++;
  }
  if (disk_ != nullptr) {
    if (absl::Status written = disk_->PutFile(file, seq); !written.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      bytes_ -= size;
      return written;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  order_.push_back(file.id);
  files_.emplace(file.id, file);
  return file;
}

std::optional<StoredFile> FileStore::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(id);
  if (it == files_.end()) return std::nullopt;
  return it->second;
}

std::vector<StoredFile> FileStore::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<StoredFile> out;
  out.reserve(order_.size());
  for (const std::string& id : order_) out.push_back(files_.at(id));
  return out;
}

bool FileStore::Delete(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(id);
  if (it == files_.end()) return false;
  bytes_ -= static_cast<int64_t>(it->second.content->size());
  files_.erase(it);
  order_.erase(std::find(order_.begin(), order_.end(), id));
  if (disk_ != nullptr) disk_->RemoveFile(id);
  return true;
}

int64_t FileStore::num_files() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(files_.size());
}

int64_t FileStore::num_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace strata::batch
