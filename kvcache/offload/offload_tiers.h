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
// Threading: every method is thread-safe. One OffloadTiers serves every engine loop of a process
// (the data-parallel groups' schedulers share it: what one group evicted another reads back);
// the disk tier's own threads do its I/O. Disk reads are shared among their requesters: each
// caller's Prefetch of a key must be followed by that caller's TakePrefetched or CancelPrefetch
// of it (a caller asks once per key at a time; Scheduler does), and every requester gets the
// bytes; the read is cancelled only when the last requester cancels.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
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
  // Store, but when the disk writer's queue is full, waits for it to drain and stores then (a
  // graceful stop's write-down: several engine loops write down at once, and none may drop).
  absl::Status StoreWaiting(const OffloadKey& key, std::string bytes);

  // The highest tier holding `key`. No effect on recency or stats.
  OffloadTier Contains(const OffloadKey& key) const;

  // The bytes of `key` from the host tier (a hit there makes it most recently used), or nullopt
  // when the host tier does not hold it.
  std::optional<std::string> Load(const OffloadKey& key);

  // Starts disk reads for the keys the host tier does not hold (DiskTier::Prefetch); a key
  // another caller is reading already joins that read.
  void Prefetch(absl::Span<const OffloadKey> keys);
  // DiskTier::TakePrefetched for this caller's request (the result is handed to each requester);
  // NotFound without a disk tier or without a request.
  std::optional<absl::StatusOr<std::string>> TakePrefetched(const OffloadKey& key);
  // Drops this caller's request; the disk read stops when no requester is left.
  void CancelPrefetch(const OffloadKey& key);

  // Waits for the disk tier's queued writes (tests, shutdown).
  void Flush();
  // Graceful shutdown: moves every host tier entry down to the disk tier, least recently used
  // first (so the order survives the restart), waiting for the writer whenever its queue is
  // full, then Flush. Without it a restart finds only what had already spilled. Returns the
  // number of entries moved.
  int64_t SpillHostToDisk();

  OffloadTiersStats Stats() const;
  // The tiers themselves (tests, tools; both are thread-safe only through this class's lock —
  // the disk tier on its own, the host tier not).
  HostTier* host() { return host_.get(); }
  DiskTier* disk() { return disk_.get(); }
  const DiskTier* disk() const { return disk_.get(); }

 private:
  // A disk read and the callers waiting for it.
  struct SharedRead {
    int requesters = 0;
    std::optional<absl::StatusOr<std::string>> result;  // taken from the disk tier, not by all
  };

  // The following require mu_ held.
  absl::Status StoreLocked(const OffloadKey& key, std::string bytes);
  // Hands host evictions down to the disk tier.
  void SpillLocked(std::vector<OffloadEntry> evicted);

  const std::unique_ptr<HostTier> host_;
  const std::unique_ptr<DiskTier> disk_;
  mutable std::mutex mu_;  // the host tier, the shared reads and the counters
  absl::flat_hash_map<OffloadKey, SharedRead> reads_;
  LoadLatency host_load_latency_;
  int64_t spilled_entries_ = 0;
  int64_t spilled_bytes_ = 0;
  int64_t spill_failures_ = 0;
  int64_t dropped_entries_ = 0;
};

}  // namespace strata::kvcache
