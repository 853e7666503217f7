// disk_tier.h: the file-per-entry disk tier, its index, writer and reader threads.
#include "kvcache/offload/disk_tier.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/log.h"
#include "kvcache/offload/disk_entry.h"

namespace strata::kvcache {
namespace {

namespace fs = std::filesystem;

constexpr char kFlag[] = "--kv-offload-dir";

// Logs the first few occurrences of a repeated warning, then one in 1000.
bool ShouldLog(int64_t count) { return count <= 10 || count % 1000 == 0; }

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<std::string> SubdirNames() {
  std::vector<std::string> names;
  for (int i = 0; i < kDiskEntryNumSubdirs; ++i) names.push_back(absl::StrFormat("%02x", i));
  return names;
}

// A valid file of this identity found by the scan.
struct ScannedEntry {
  OffloadKey key;
  int64_t file_bytes = 0;
  timespec mtime{};
  std::string name;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const std::string& dir,
                                                         int64_t capacity_bytes,
                                                         const OffloadIdentity& identity,
                                                         const DiskTierOptions& options) {
  if (absl::Status s = ValidateOffloadIdentity(identity); !s.ok()) return s;
  if (capacity_bytes <= kDiskEntryHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-offload-disk is ", capacity_bytes,
                                                   " bytes, must be more than the ",
                                                   kDiskEntryHeaderBytes, "-byte entry header"));
  }
  if (options.max_queued_writes < 1 || options.max_queued_write_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv offload disk tier: max_queued_writes is ", options.max_queued_writes,
                     " (must be >= 1), max_queued_write_bytes is ", options.max_queued_write_bytes,
                     " (must be >= 0)"));
  }
  absl::StatusOr<std::unique_ptr<DirectoryLock>> lock =
      DirectoryLock::Acquire(dir, SubdirNames(), kFlag);
  if (!lock.ok()) return lock.status();
  std::unique_ptr<DiskTier> tier(new DiskTier(
      dir, capacity_bytes, OffloadIdentityFingerprint(identity), options, *std::move(lock)));
  tier->RebuildIndex();
  tier->StartThreads();
  return tier;
}

DiskTier::DiskTier(std::string dir, int64_t capacity_bytes, uint64_t identity_fingerprint,
                   const DiskTierOptions& options, std::unique_ptr<DirectoryLock> lock)
    : dir_(std::move(dir)),
      capacity_bytes_(capacity_bytes),
      identity_fingerprint_(identity_fingerprint),
      options_(options),
      lock_(std::move(lock)) {}

DiskTier::~DiskTier() {
  SetPausedForTesting(false);
  Flush();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  writer_wake_.notify_all();
  reader_wake_.notify_all();
  writer_.join();
  reader_.join();
}

std::string DiskTier::PathOf(const OffloadKey& key) const {
  return absl::StrCat(dir_, "/", DiskEntrySubdir(key), "/",
                      DiskEntryFileName(identity_fingerprint_, key));
}

void DiskTier::RebuildIndex() {
  const auto start = std::chrono::steady_clock::now();
  std::vector<ScannedEntry> found;
  for (const std::string& subdir : SubdirNames()) {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir_ + "/" + subdir, ec)) {
      const std::string name = e.path().filename().string();
      const std::string path = e.path().string();
      const bool is_tmp = name.ends_with(".tmp");
      const std::optional<ParsedDiskEntryName> parsed = ParseDiskEntryFileName(
          is_tmp ? std::string_view(name).substr(0, name.size() - 4) : std::string_view(name));
      if (!parsed.has_value() || parsed->identity_fingerprint != identity_fingerprint_) {
        ++stats_.foreign_files;  // another identity's: never opened, never deleted
        continue;
      }
      if (is_tmp) {
        ::unlink(path.c_str());  // an unfinished write of ours (a crash or kill)
        ++stats_.tmp_files_removed;
        continue;
      }
      absl::StatusOr<DiskEntryFileInfo> info =
          subdir == DiskEntrySubdir(parsed->key)
              ? ReadDiskEntryHeader(path, identity_fingerprint_, parsed->key)
              : absl::DataLossError(
                    absl::StrCat("kv offload entry ", path, ": in the wrong subdirectory"));
      if (!info.ok()) {
        ++stats_.corrupt_entries;
        if (ShouldLog(stats_.corrupt_entries)) {
          LOG_WARN("kvoffload", "skipping and deleting a bad disk tier file: {}",
                   std::string(info.status().message()));
        }
        ::unlink(path.c_str());
        continue;
      }
      found.push_back(ScannedEntry{parsed->key, info->file_bytes, info->mtime, name});
    }
  }
  // Oldest first, so the least recently written or read is evicted first.
  std::sort(found.begin(), found.end(), [](const ScannedEntry& a, const ScannedEntry& b) {
    if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec < b.mtime.tv_sec;
    if (a.mtime.tv_nsec != b.mtime.tv_nsec) return a.mtime.tv_nsec < b.mtime.tv_nsec;
    return a.name < b.name;
  });
  std::lock_guard<std::mutex> lock(mu_);
  for (const ScannedEntry& entry : found) InsertLocked(entry.key, entry.file_bytes, nullptr);
  while (bytes_used_ > capacity_bytes_) {  // the capacity shrank since the files were written
    ++stats_.evictions;
    RemoveLocked(lru_.front(), /*delete_file=*/true);
  }
  stats_.open_scan_seconds = SecondsSince(start);
  LOG_INFO("kvoffload",
           "disk tier dir={} identity={:016x} entries={} bytes_used={} capacity_bytes={} "
           "evicted={} corrupt_skipped={} tmp_removed={} foreign_files={} scan_ms={:.1f}",
           dir_, identity_fingerprint_, index_.size(), bytes_used_, capacity_bytes_,
           stats_.evictions, stats_.corrupt_entries, stats_.tmp_files_removed, stats_.foreign_files,
           stats_.open_scan_seconds * 1e3);
  if (stats_.foreign_files > 0) {
    LOG_WARN("kvoffload",
             "{} files in {} belong to another checkpoint, cache dtype, layout or format version "
             "(or are not disk tier entries): left alone, not read, not counted in the budget",
             stats_.foreign_files, dir_);
  }
}

void DiskTier::StartThreads() {
  writer_ = std::thread([this] { WriterLoop(); });
  reader_ = std::thread([this] { ReaderLoop(); });
}

void DiskTier::InsertLocked(const OffloadKey& key, int64_t file_bytes,
                            std::shared_ptr<const std::string> pending) {
  CHECK(!index_.contains(key));
  lru_.push_back(key);
  index_[key] =
      IndexEntry{file_bytes, next_generation_++, std::move(pending), std::prev(lru_.end())};
  bytes_used_ += file_bytes;
}

void DiskTier::RemoveLocked(OffloadKey key, bool delete_file) {
  const auto it = index_.find(key);
  CHECK(it != index_.end());
  bytes_used_ -= it->second.file_bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
  if (delete_file) {
    write_queue_.push_back(WriteJob{/*is_delete=*/true, key, 0, nullptr});
    writer_wake_.notify_one();
  }
}

absl::Status DiskTier::Put(const OffloadKey& key, std::string bytes) {
  const int64_t payload_bytes = static_cast<int64_t>(bytes.size());
  const int64_t file_bytes = kDiskEntryHeaderBytes + payload_bytes;
  std::lock_guard<std::mutex> lock(mu_);
  if (file_bytes > capacity_bytes_) {
    ++stats_.refused_puts;
    return absl::InvalidArgumentError(absl::StrCat(
        "kv offload disk tier: entry ", OffloadKindName(key.kind), " of ", file_bytes, " bytes (",
        kDiskEntryHeaderBytes, "-byte header included) exceeds the tier's capacity of ",
        capacity_bytes_, " bytes (--kv-offload-disk)"));
  }
  if (const auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru);
    return absl::OkStatus();
  }
  if (stats_.queued_writes > 0 &&
      (stats_.queued_writes >= options_.max_queued_writes ||
       stats_.queued_write_bytes + payload_bytes > options_.max_queued_write_bytes)) {
    ++stats_.dropped_puts;
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv offload disk tier: writer queue full (", stats_.queued_writes, " writes of ",
        stats_.queued_write_bytes, " bytes queued; limits ", options_.max_queued_writes,
        " writes, ", options_.max_queued_write_bytes, " bytes): entry dropped"));
  }
  while (bytes_used_ + file_bytes > capacity_bytes_) {
    ++stats_.evictions;
    RemoveLocked(lru_.front(), /*delete_file=*/true);
  }
  auto shared = std::make_shared<const std::string>(std::move(bytes));
  InsertLocked(key, file_bytes, shared);
  write_queue_.push_back(WriteJob{/*is_delete=*/false, key, index_[key].generation, shared});
  ++stats_.queued_writes;
  stats_.queued_write_bytes += payload_bytes;
  writer_wake_.notify_one();
  return absl::OkStatus();
}

bool DiskTier::Contains(const OffloadKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.contains(key);
}

bool DiskTier::Erase(const OffloadKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!index_.contains(key)) return false;
  RemoveLocked(key, /*delete_file=*/true);
  return true;
}

void DiskTier::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    writer_wake_.wait(lock, [this] { return stopping_ || (!paused_ && !write_queue_.empty()); });
    if (write_queue_.empty()) return;  // stopping (the destructor flushed first)
    const WriteJob job = std::move(write_queue_.front());
    write_queue_.pop_front();
    writer_busy_ = true;
    const auto it = index_.find(job.key);
    const bool live = it != index_.end() && it->second.generation == job.generation;
    absl::Status status;
    if (job.is_delete || live) {  // a write whose entry is gone already is skipped
      const std::string path = PathOf(job.key);
      lock.unlock();
      if (job.is_delete) {
        ::unlink(path.c_str());  // ENOENT: its write was skipped or failed
      } else {
        status = WriteDiskEntry(path, identity_fingerprint_, job.key, *job.bytes, options_.fsync);
      }
      lock.lock();
    }
    if (!job.is_delete) FinishWriteLocked(job, live ? status : absl::OkStatus());
    writer_busy_ = false;
    if (write_queue_.empty()) writer_idle_.notify_all();
  }
}

void DiskTier::FinishWriteLocked(const WriteJob& job, const absl::Status& status) {
  const int64_t payload_bytes = static_cast<int64_t>(job.bytes->size());
  --stats_.queued_writes;
  stats_.queued_write_bytes -= payload_bytes;
  const auto it = index_.find(job.key);
  const bool live = it != index_.end() && it->second.generation == job.generation;
  if (status.ok()) {
    if (live) {
      stats_.bytes_written += kDiskEntryHeaderBytes + payload_bytes;
      it->second.pending.reset();
    }
    return;
  }
  ++stats_.write_failures;
  if (ShouldLog(stats_.write_failures)) {
    LOG_WARN("kvoffload", "disk tier write failed (entry dropped, failures={}): {}",
             stats_.write_failures, std::string(status.message()));
  }
  if (live) RemoveLocked(job.key, /*delete_file=*/false);
}

std::optional<DiskTier::LoadTicket> DiskTier::TicketLocked(const OffloadKey& key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.end(), lru_, it->second.lru);
  return LoadTicket{key, it->second.generation, it->second.file_bytes - kDiskEntryHeaderBytes,
                    it->second.pending};
}

absl::StatusOr<std::string> DiskTier::Load(const LoadTicket& ticket) const {
  if (ticket.pending != nullptr) return *ticket.pending;
  return ReadDiskEntry(PathOf(ticket.key), identity_fingerprint_, ticket.key, ticket.payload_bytes);
}

void DiskTier::RecordLoadLocked(const LoadTicket& ticket, const absl::StatusOr<std::string>& result,
                                double seconds) {
  stats_.load_latency.Record(seconds);
  if (result.ok()) {
    ++stats_.hits;
    stats_.bytes_read += static_cast<int64_t>(result->size());
    return;
  }
  ++stats_.misses;
  ++stats_.corrupt_entries;
  if (ShouldLog(stats_.corrupt_entries)) {
    LOG_WARN("kvoffload", "dropping a bad disk tier entry (will recompute): {}",
             std::string(result.status().message()));
  }
  const auto it = index_.find(ticket.key);
  if (it != index_.end() && it->second.generation == ticket.generation) {
    RemoveLocked(ticket.key, /*delete_file=*/true);
  }
}

absl::StatusOr<std::string> DiskTier::Get(const OffloadKey& key) {
  std::unique_lock<std::mutex> lock(mu_);
  const std::optional<LoadTicket> ticket = TicketLocked(key);
  if (!ticket.has_value()) {
    ++stats_.misses;
    return absl::NotFoundError(absl::StrFormat("kv offload disk tier: no entry %016x/%s", key.hash,
                                               OffloadKindName(key.kind)));
  }
  lock.unlock();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> result = Load(*ticket);
  const double seconds = SecondsSince(start);
  lock.lock();
  RecordLoadLocked(*ticket, result, seconds);
  return result;
}

void DiskTier::Prefetch(absl::Span<const OffloadKey> keys) {
  std::lock_guard<std::mutex> lock(mu_);
  bool queued = false;
  for (const OffloadKey& key : keys) {
    if (prefetches_.contains(key)) continue;
    const auto it = index_.find(key);
    if (it == index_.end()) {
      ++stats_.misses;
      continue;
    }
    lru_.splice(lru_.end(), lru_, it->second.lru);
    prefetches_.emplace(key, Prefetched{});
    read_queue_.push_back(key);
    queued = true;
  }
  if (queued) reader_wake_.notify_one();
}

void DiskTier::ReaderLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    reader_wake_.wait(lock, [this] { return stopping_ || (!paused_ && !read_queue_.empty()); });
    if (stopping_) return;
    const OffloadKey key = read_queue_.front();
    read_queue_.pop_front();
    const auto request = prefetches_.find(key);
    if (request != prefetches_.end() && !request->second.ready) {  // else cancelled or served
      reader_busy_ = true;
      absl::StatusOr<std::string> result = absl::NotFoundError(
          absl::StrFormat("kv offload disk tier: entry %016x/%s was evicted before it was read",
                          key.hash, OffloadKindName(key.kind)));
      if (const std::optional<LoadTicket> ticket = TicketLocked(key); ticket.has_value()) {
        lock.unlock();
        const auto start = std::chrono::steady_clock::now();
        result = Load(*ticket);
        const double seconds = SecondsSince(start);
        lock.lock();
        RecordLoadLocked(*ticket, result, seconds);
      } else {
        ++stats_.misses;
      }
      const auto again = prefetches_.find(key);  // it may have been cancelled meanwhile
      if (again != prefetches_.end() && !again->second.ready) {
        if (result.ok()) stats_.prefetched_bytes += static_cast<int64_t>(result->size());
        again->second = Prefetched{true, std::move(result)};
      }
      reader_busy_ = false;
    }
    if (read_queue_.empty()) reader_idle_.notify_all();
  }
}

std::optional<absl::StatusOr<std::string>> DiskTier::TakePrefetched(const OffloadKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = prefetches_.find(key);
  if (it == prefetches_.end()) {
    return absl::StatusOr<std::string>(absl::NotFoundError(
        absl::StrFormat("kv offload disk tier: entry %016x/%s was not prefetched (or is absent)",
                        key.hash, OffloadKindName(key.kind))));
  }
  if (!it->second.ready) return std::nullopt;
  absl::StatusOr<std::string> result = std::move(it->second.result);
  prefetches_.erase(it);
  if (result.ok()) stats_.prefetched_bytes -= static_cast<int64_t>(result->size());
  return result;
}

void DiskTier::CancelPrefetch(const OffloadKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = prefetches_.find(key);
  if (it == prefetches_.end()) return;
  if (it->second.ready && it->second.result.ok()) {
    stats_.prefetched_bytes -= static_cast<int64_t>(it->second.result->size());
  }
  prefetches_.erase(it);
}

void DiskTier::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  writer_idle_.wait(lock, [this] { return write_queue_.empty() && !writer_busy_; });
}

void DiskTier::WaitForPrefetches() {
  std::unique_lock<std::mutex> lock(mu_);
  reader_idle_.wait(lock, [this] { return read_queue_.empty() && !reader_busy_; });
}

void DiskTier::SetPausedForTesting(bool paused) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = paused;
  }
  writer_wake_.notify_all();
  reader_wake_.notify_all();
}

DiskTierStats DiskTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DiskTierStats stats = stats_;
  stats.num_entries = static_cast<int64_t>(index_.size());
  stats.bytes_used = bytes_used_;
  stats.capacity_bytes = capacity_bytes_;
  stats.prefetches_pending = 0;
  for (const auto& [key, request] : prefetches_) stats.prefetches_pending += !request.ready;
  return stats;
}

}  // namespace strata::kvcache
