// host_tier.h: the LRU byte-budgeted host-memory tier.
#include "kvcache/offload/host_tier.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace strata::kvcache {

HostTier::HostTier(int64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {
  CHECK_GE(capacity_bytes, 0);
}

absl::Status HostTier::Put(const OffloadKey& key, std::string bytes,
                           std::vector<OffloadEntry>* evicted) {
  const int64_t size_bytes = static_cast<int64_t>(bytes.size());
  if (size_bytes > capacity_bytes_) {
    ++stats_.refused;
    return absl::InvalidArgumentError(absl::StrCat(
        "kv offload host tier: entry ", OffloadKindName(key.kind), " of ", size_bytes,
        " bytes exceeds the tier's capacity of ", capacity_bytes_, " bytes (--kv-offload-memory)"));
  }
  Erase(key);
  while (bytes_used_ + size_bytes > capacity_bytes_) {
    CHECK(!lru_.empty());
    OffloadEntry& victim = lru_.front();
    bytes_used_ -= static_cast<int64_t>(victim.bytes.size());
    index_.erase(victim.key);
    ++stats_.evictions;
    if (evicted != nullptr) evicted->push_back(std::move(victim));
    lru_.pop_front();
  }
  lru_.push_back(OffloadEntry{key, std::move(bytes)});
  index_[key] = std::prev(lru_.end());
  bytes_used_ += size_bytes;
  stats_.bytes_in += size_bytes;
  return absl::OkStatus();
}

bool HostTier::Contains(const OffloadKey& key) const { return index_.contains(key); }

std::optional<std::string_view> HostTier::Find(const OffloadKey& key) {
  const auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return std::nullopt;
  }
  lru_.splice(lru_.end(), lru_, it->second);
  ++stats_.hits;
  stats_.bytes_out += static_cast<int64_t>(it->second->bytes.size());
  return std::string_view(it->second->bytes);
}

std::optional<std::string> HostTier::Get(const OffloadKey& key) {
  const std::optional<std::string_view> bytes = Find(key);
  if (!bytes.has_value()) return std::nullopt;
  return std::string(*bytes);
}

bool HostTier::Erase(const OffloadKey& key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return false;
  bytes_used_ -= static_cast<int64_t>(it->second->bytes.size());
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

std::vector<OffloadEntry> HostTier::TakeAll() {
  std::vector<OffloadEntry> entries;
  entries.reserve(lru_.size());
  for (OffloadEntry& entry : lru_) entries.push_back(std::move(entry));
  lru_.clear();
  index_.clear();
  bytes_used_ = 0;
  return entries;
}

HostTierStats HostTier::stats() const {
  HostTierStats stats = stats_;
  stats.num_entries = num_entries();
  stats.bytes_used = bytes_used_;
  stats.capacity_bytes = capacity_bytes_;
  return stats;
}

}  // namespace strata::kvcache
