// offload_tiers.h: host tier above disk tier, spilling down on host eviction.
#include "kvcache/offload/offload_tiers.h"

#include <chrono>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/check.h"

namespace strata::kvcache {

const char* OffloadTierName(OffloadTier tier) {
  switch (tier) {
    case OffloadTier::kNone:
      return "none";
    case OffloadTier::kHost:
      return "host";
    case OffloadTier::kDisk:
      return "disk";
  }
  return "unknown";
}

OffloadTiers::OffloadTiers(std::unique_ptr<HostTier> host, std::unique_ptr<DiskTier> disk)
    : host_(std::move(host)), disk_(std::move(disk)) {
  CHECK(host_ != nullptr || disk_ != nullptr) << "OffloadTiers needs at least one tier";
}

absl::Status OffloadTiers::Store(const OffloadKey& key, std::string bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return StoreLocked(key, std::move(bytes));
}

absl::Status OffloadTiers::StoreWaiting(const OffloadKey& key, std::string bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  if (disk_ == nullptr ||
      (host_ != nullptr && static_cast<int64_t>(bytes.size()) <= host_->capacity_bytes())) {
    return StoreLocked(key, std::move(bytes));  // the host tier takes it (its spills may drop)
  }
  lock.unlock();  // Put never waits, so another loop may fill the queue again: retry
  for (;;) {
    absl::Status status = disk_->Put(key, bytes);
    if (status.code() != absl::StatusCode::kResourceExhausted) return status;
    disk_->Flush();  // an empty queue takes any entry
  }
}

absl::Status OffloadTiers::StoreLocked(const OffloadKey& key, std::string bytes) {
  const bool fits_host =
      host_ != nullptr && static_cast<int64_t>(bytes.size()) <= host_->capacity_bytes();
  if (host_ != nullptr && (fits_host || disk_ == nullptr)) {
    std::vector<OffloadEntry> evicted;
    absl::Status status = host_->Put(key, std::move(bytes), &evicted);
    SpillLocked(std::move(evicted));
    return status;
  }
  return disk_->Put(key, std::move(bytes));
}

void OffloadTiers::SpillLocked(std::vector<OffloadEntry> evicted) {
  for (OffloadEntry& entry : evicted) {
    if (disk_ == nullptr) {
      ++dropped_entries_;
      continue;
    }
    const int64_t size_bytes = static_cast<int64_t>(entry.bytes.size());
    if (disk_->Put(entry.key, std::move(entry.bytes)).ok()) {
      ++spilled_entries_;
      spilled_bytes_ += size_bytes;
    } else {
      ++spill_failures_;
    }
  }
}

OffloadTier OffloadTiers::Contains(const OffloadKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (host_ != nullptr && host_->Contains(key)) return OffloadTier::kHost;
  if (disk_ != nullptr && disk_->Contains(key)) return OffloadTier::kDisk;
  return OffloadTier::kNone;
}

std::optional<std::string> OffloadTiers::Load(const OffloadKey& key) {
  if (host_ == nullptr) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const auto start = std::chrono::steady_clock::now();
  std::optional<std::string> bytes = host_->Get(key);
  if (bytes.has_value()) {
    host_load_latency_.Record(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return bytes;
}

void OffloadTiers::Prefetch(absl::Span<const OffloadKey> keys) {
  if (disk_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<OffloadKey> from_disk;
  for (const OffloadKey& key : keys) {
    if (host_ != nullptr && host_->Contains(key)) continue;
    if (reads_[key].requesters++ == 0) from_disk.push_back(key);  // else it joins that read
  }
  disk_->Prefetch(from_disk);
}

std::optional<absl::StatusOr<std::string>> OffloadTiers::TakePrefetched(const OffloadKey& key) {
  if (disk_ == nullptr) {
    return absl::StatusOr<std::string>(absl::NotFoundError(
        absl::StrFormat("kv offload: no disk tier to prefetch %016x from", key.hash)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reads_.find(key);
  if (it == reads_.end()) return disk_->TakePrefetched(key);  // not asked for: NotFound
  SharedRead& read = it->second;
  if (!read.result.has_value()) {
    read.result = disk_->TakePrefetched(key);
    if (!read.result.has_value()) return std::nullopt;  // still loading
  }
  if (--read.requesters > 0) return read.result;  // a copy; the others take theirs later
  std::optional<absl::StatusOr<std::string>> result = std::move(read.result);
  reads_.erase(it);
  return result;
}

void OffloadTiers::CancelPrefetch(const OffloadKey& key) {
  if (disk_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reads_.find(key);
  if (it == reads_.end()) return;
  if (--it->second.requesters > 0) return;
  if (!it->second.result.has_value()) disk_->CancelPrefetch(key);
  reads_.erase(it);
}

void OffloadTiers::Flush() {
  if (disk_ != nullptr) disk_->Flush();
}

int64_t OffloadTiers::SpillHostToDisk() {
  if (host_ == nullptr || disk_ == nullptr) return 0;
  std::lock_guard<std::mutex> lock(mu_);  // a shutdown's: waiting for the writer under it is fine
  int64_t moved = 0;
  for (OffloadEntry& entry : host_->TakeAll()) {
    const int64_t size_bytes = static_cast<int64_t>(entry.bytes.size());
    absl::Status status = disk_->Put(entry.key, entry.bytes);
    if (status.code() == absl::StatusCode::kResourceExhausted) {  // queue full: an empty one
      disk_->Flush();                                             // takes any entry
      status = disk_->Put(entry.key, std::move(entry.bytes));
    }
    if (status.ok()) {
      ++moved;
      ++spilled_entries_;
      spilled_bytes_ += size_bytes;
    } else {
      ++spill_failures_;
    }
  }
  disk_->Flush();
  return moved;
}

OffloadTiersStats OffloadTiers::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  OffloadTiersStats stats;
  if (host_ != nullptr) stats.host = host_->stats();
  stats.host_load_latency = host_load_latency_;
  if (disk_ != nullptr) stats.disk = disk_->stats();
  stats.spilled_entries = spilled_entries_;
  stats.spilled_bytes = spilled_bytes_;
  stats.spill_failures = spill_failures_;
  stats.dropped_entries = dropped_entries_;
  return stats;
}

}  // namespace strata::kvcache
