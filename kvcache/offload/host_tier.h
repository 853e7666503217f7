// The host-memory tier: offloaded entries kept in process memory under a byte budget, least
// recently used first out. Evicted entries are handed back to the caller (OffloadTiers spills
// them to the disk tier) instead of being dropped here.
//
// Budget: the sum of the entries' payload sizes never exceeds capacity_bytes (bookkeeping of a
// few dozen bytes per entry is not counted). An entry bigger than the whole capacity is refused.
//
// Threading: not thread-safe; the engine loop thread owns it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "kvcache/offload/offload_key.h"

namespace strata::kvcache {

struct HostTierStats {
  int64_t num_entries = 0;
  int64_t bytes_used = 0;
  int64_t capacity_bytes = 0;
  int64_t hits = 0;       // Find / Get that found the key
  int64_t misses = 0;     // Find / Get that did not
  int64_t bytes_in = 0;   // payload bytes stored by Put
  int64_t bytes_out = 0;  // payload bytes handed out by Find / Get
  int64_t evictions = 0;  // entries pushed out to make room (handed to the caller)
  int64_t refused = 0;    // Puts of an entry bigger than the capacity
};

class HostTier {
 public:
  // `capacity_bytes` >= 0 (0: every Put is refused).
  explicit HostTier(int64_t capacity_bytes);
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // Stores `bytes` under `key` as the most recently used entry, replacing an entry of the same
  // key. Evicts least recently used entries until it fits and appends them, oldest first, to
  // `*evicted` (may be null: they are dropped). InvalidArgument naming the sizes when
  // bytes.size() > capacity_bytes; nothing changes then.
  absl::Status Put(const OffloadKey& key, std::string bytes, std::vector<OffloadEntry>* evicted);

  // Whether `key` is present. No effect on recency or stats.
  bool Contains(const OffloadKey& key) const;
  // The bytes of `key`, marked most recently used (a hit), or nullopt (a miss). The view stays
  // valid until the next non-const call.
  std::optional<std::string_view> Find(const OffloadKey& key);
  // A copy of Find's bytes.
  std::optional<std::string> Get(const OffloadKey& key);
  // Removes `key`; returns whether it was present.
  bool Erase(const OffloadKey& key);
  // Removes and returns every entry, least recently used first (a shutdown's spill to disk).
  std::vector<OffloadEntry> TakeAll();

  int64_t bytes_used() const { return bytes_used_; }
  int64_t capacity_bytes() const { return capacity_bytes_; }
  int64_t num_entries() const { return static_cast<int64_t>(lru_.size()); }
  HostTierStats stats() const;

 private:
  // Least recently used first.
  std::list<OffloadEntry> lru_;
  absl::flat_hash_map<OffloadKey, std::list<OffloadEntry>::iterator> index_;
  const int64_t capacity_bytes_;
  int64_t bytes_used_ = 0;
  HostTierStats stats_;
};

}  // namespace strata::kvcache
