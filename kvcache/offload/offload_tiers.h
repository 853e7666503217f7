// The offload tiers below the device cache: an optional host-memory tier above an optional disk
// tier. The engine stores what the prefix cache evicts, asks where a key is, and loads it back:
//
//   Store(key, bytes) ──► host tier ──(its LRU evictions spill)──► disk tier
//                         (no host tier, or an entry bigger than it: straight to disk)
//   Contains(key)     ──► kHost / kDisk / kNone (host first)
//   kHost: Load(key)                   the bytes now (a memory copy)
//   kDisk: Prefetch(keys), then TakePrefetched(key) on a later step (disk_tier.h protocol)
//
// A key may be in both tiers (a disk entry read back and evicted again is stored in the host
// tier as well); the host tier answers first. Neither tier promotes on a hit: the bytes go back
// into the device cache, and come down again when it evicts them.
//
// Threading: the engine loop thread calls everything; the disk tier's own threads do its I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvcache/offload/disk_tier.h"
#include "kvcache/offload/host_tier.h"
#include "kvcache/offload/load_latency.h"
#include "kvcache/offload/offload_key.h"

namespace strata::kvcache {

enum class OffloadTier : uint8_t { kNone = 0, kHost = 1, kDisk = 2 };

// "none" / "host" / "disk".
const char* OffloadTierName(OffloadTier tier);

// Plain numbers per tier for /server_info and Prometheus (absent tiers are nullopt).
struct OffloadTiersStats {
  std::optional<HostTierStats> host;
  LoadLatency host_load_latency;  // Load's copy out of host memory
  std::optional<DiskTierStats> disk;
  int64_t spilled_entries = 0;  // host evictions handed to the disk tier and accepted
  int64_t spilled_bytes = 0;
  int64_t spill_failures = 0;   // host evictions the disk tier refused or dropped (queue full)
  int64_t dropped_entries = 0;  // host evictions with no disk tier below (gone)
};

class OffloadTiers {
 public:
  // At least one of `host` and `disk` is non-null.
  OffloadTiers(std::unique_ptr<HostTier> host, std::unique_ptr<DiskTier> disk);
  OffloadTiers(const OffloadTiers&) = delete;
  OffloadTiers& operator=(const OffloadTiers&) = delete;

  // Stores an entry the device cache evicted (see the diagram). Host evictions that the disk
  // tier refuses are counted, not returned. Errors: the disk tier's Put error when the entry
  // went straight to it; the host tier's when there is no disk tier and it is too big.
  absl::Status Store(const OffloadKey& key, std::string bytes);

  // The highest tier holding `key`. No effect on recency or stats.
  OffloadTier Contains(const OffloadKey& key) const;

  // The bytes of `key` from the host tier (a hit there makes it most recently used), or nullopt
  // when the host tier does not hold it.
  std::optional<std::string> Load(const OffloadKey& key);

  // Starts disk reads for the keys the host tier does not hold (DiskTier::Prefetch).
  void Prefetch(absl::Span<const OffloadKey> keys);
  // DiskTier::TakePrefetched; NotFound without a disk tier.
  std::optional<absl::StatusOr<std::string>> TakePrefetched(const OffloadKey& key);
  void CancelPrefetch(const OffloadKey& key);

  // Waits for the disk tier's queued writes (tests, shutdown).
  void Flush();
  // Graceful shutdown: moves every host tier entry down to the disk tier, least recently used
  // first (so the order survives the restart), waiting for the writer whenever its queue is
  // full, then Flush. Without it a restart finds only what had already spilled. Returns the
  // number of entries moved.
  int64_t SpillHostToDisk();

  OffloadTiersStats Stats() const;
  HostTier* host() { return host_.get(); }
  DiskTier* disk() { return disk_.get(); }

 private:
  // Hands host evictions down to the disk tier.
  void Spill(std::vector<OffloadEntry> evicted);

  const std::unique_ptr<HostTier> host_;
  const std::unique_ptr<DiskTier> disk_;
  LoadLatency host_load_latency_;
  int64_t spilled_entries_ = 0;
  int64_t spilled_bytes_ = 0;
  int64_t spill_failures_ = 0;
  int64_t dropped_entries_ = 0;
};

}  // namespace strata::kvcache
