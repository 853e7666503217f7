// Prometheus series of the offload tiers below the cache (--kv-offload-memory, --kv-offload-dir;
// docs/kv-offload.md), one set per process (one engine rank serves with tiers). Set at each
// scrape from the engine's last stats snapshot: the tiers' totals become counter increments.
//
//   gauges      strata:kv_offload_bytes{tier}            bytes held (disk: files, queued included)
//               strata:kv_offload_capacity_bytes{tier}   --kv-offload-memory / --kv-offload-disk
//               strata:kv_offload_entries{tier}          blocks and KDA checkpoints held
//   counters    strata:kv_offload_hits_total{tier}       loads that returned bytes
//               strata:kv_offload_misses_total{tier}     loads of an absent or bad entry
//               strata:kv_offload_stored_bytes_total{tier}  bytes written into the tier
//               strata:kv_offload_loaded_bytes_total{tier}  bytes read out of it
//               strata:kv_offload_evictions_total{tier}  entries pushed out to make room
//               strata:kv_offload_dropped_total{tier}    entries not kept: host evictions with no
//                                                        disk tier below, disk writes refused
//                                                        (writer queue full, bigger than the tier)
//               strata:kv_offload_write_failures_total{tier="disk"}  writes that failed (disk
//                                                        full, I/O error): the alert's signal
//               strata:kv_offload_corrupt_entries_total{tier="disk"}  bad files skipped
//               strata:kv_offload_hit_tokens_total   prompt tokens of prefix hits that went on
//                                                    in a tier (device part included)
//               strata:kv_offload_load_failures_total  tier hits dropped for a failed read
//   histograms  strata:kv_offload_load_seconds{tier}  one entry's load (host: copy; disk: read)
//
// A tier that is off exports nothing. Thread-safe (one scrape at a time sets them).
#pragma once

#include <memory>
#include <mutex>

#include "kvcache/offload/offload_tiers.h"
#include "scheduler/scheduler_stats.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace strata::server {

class OffloadMetrics {
 public:
  // Registers the series of the tiers that are on.
  OffloadMetrics(prometheus::Registry& registry, bool host_on, bool disk_on);
  ~OffloadMetrics();
  OffloadMetrics(const OffloadMetrics&) = delete;
  OffloadMetrics& operator=(const OffloadMetrics&) = delete;

  // From a snapshot (EngineStats::offload, EngineStats::scheduler); totals only grow, so the
  // counters advance by what grew since the previous call.
  void Set(const kvcache::OffloadTiersStats& tiers, const scheduler::SchedulerStats& scheduler);

 private:
  struct Series;
  std::unique_ptr<Series> s_;
  std::mutex mu_;
};

}  // namespace strata::server
