// offload_metrics.h: the series of each tier that is on, advanced from snapshots.
#include "server/offload_metrics.h"

#include <algorithm>
#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/total_counter.h"

namespace strata::server {
namespace {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;

// A histogram that follows a LoadLatency.
struct LatencyHistogram {
  Histogram* histogram = nullptr;
  kvcache::LoadLatency last;
  void Follow(const kvcache::LoadLatency& now) {
    if (histogram == nullptr || now.count <= last.count) return;
    std::vector<double> increments(now.bucket_counts.size());
    for (size_t i = 0; i < increments.size(); ++i) {
      increments[i] = static_cast<double>(now.bucket_counts[i] - last.bucket_counts[i]);
    }
    histogram->ObserveMultiple(increments, now.sum_seconds - last.sum_seconds);
    last = now;
  }
};

struct TierSeries {
  Gauge* bytes = nullptr;
  Gauge* capacity = nullptr;
  Gauge* entries = nullptr;
  TotalCounter hits, misses, stored, loaded, evictions, dropped, write_failures, corrupt;
  LatencyHistogram load_seconds;
};

}  // namespace

struct OffloadMetrics::Series {
  std::optional<TierSeries> host, disk;
  TotalCounter hit_tokens, load_failures;
};

OffloadMetrics::OffloadMetrics(prometheus::Registry& registry, bool host_on, bool disk_on)
    : s_(std::make_unique<Series>()) {
  if (!host_on && !disk_on) return;
  auto& bytes = prometheus::BuildGauge()
                    .Name("strata:kv_offload_bytes")
                    .Help("Bytes an offload tier holds (disk: file bytes, queued writes included)")
                    .Register(registry);
  auto& capacity =
      prometheus::BuildGauge()
          .Name("strata:kv_offload_capacity_bytes")
          .Help("Bytes an offload tier may hold (--kv-offload-memory, --kv-offload-disk)")
          .Register(registry);
  auto& entries = prometheus::BuildGauge()
                      .Name("strata:kv_offload_entries")
                      .Help("Latent blocks and KDA checkpoints an offload tier holds")
                      .Register(registry);
  const auto counter = [&](const char* name, const char* help) -> prometheus::Family<Counter>& {
    return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
  };
  auto& hits = counter("strata:kv_offload_hits_total", "Offload tier loads that returned bytes");
  auto& misses =
      counter("strata:kv_offload_misses_total", "Offload tier loads of an absent or bad entry");
  auto& stored = counter("strata:kv_offload_stored_bytes_total", "Bytes written into a tier");
  auto& loaded = counter("strata:kv_offload_loaded_bytes_total", "Bytes read out of a tier");
  auto& evictions =
      counter("strata:kv_offload_evictions_total", "Tier entries pushed out to make room");
  auto& dropped =
      counter("strata:kv_offload_dropped_total",
              "Entries a tier did not keep (no tier below, writer queue full, too big)");
  auto& load_seconds = prometheus::BuildHistogram()
                           .Name("strata:kv_offload_load_seconds")
                           .Help("Time to load one entry from a tier (host: copy, disk: read)")
                           .Register(registry);
  const Histogram::BucketBoundaries buckets(kvcache::LoadLatency::kBucketUpperSeconds.begin(),
                                            kvcache::LoadLatency::kBucketUpperSeconds.end());
  const auto make = [&](const char* tier) {
    const Labels labels{{"tier", tier}};
    TierSeries t;
    t.bytes = &bytes.Add(labels);
    t.capacity = &capacity.Add(labels);
    t.entries = &entries.Add(labels);
    t.hits.counter = &hits.Add(labels);
    t.misses.counter = &misses.Add(labels);
    t.stored.counter = &stored.Add(labels);
    t.loaded.counter = &loaded.Add(labels);
    t.evictions.counter = &evictions.Add(labels);
    t.dropped.counter = &dropped.Add(labels);
    t.load_seconds.histogram = &load_seconds.Add(labels, buckets);
    return t;
  };
  if (host_on) s_->host = make("host");
  if (disk_on) {
    s_->disk = make("disk");
    s_->disk->write_failures.counter =
        &counter("strata:kv_offload_write_failures_total",
                 "Disk tier writes that failed (disk full, I/O error): the entry was dropped")
             .Add({{"tier", "disk"}});
    s_->disk->corrupt.counter = &counter("strata:kv_offload_corrupt_entries_total",
                                         "Bad files of this server's entries skipped and removed")
                                     .Add({{"tier", "disk"}});
  }
  s_->hit_tokens.counter = &counter("strata:kv_offload_hit_tokens_total",
                                    "Prompt tokens of prefix hits that went on in an offload tier")
                                .Add({});
  s_->load_failures.counter =
      &counter("strata:kv_offload_load_failures_total",
               "Offload tier hits dropped because a read failed (the prefix was computed)")
           .Add({});
}

OffloadMetrics::~OffloadMetrics() = default;

void OffloadMetrics::Set(const kvcache::OffloadTiersStats& tiers,
                         const scheduler::SchedulerStats& scheduler) {
  std::lock_guard<std::mutex> lock(mu_);
  if (s_->host.has_value() && tiers.host.has_value()) {
    TierSeries& t = *s_->host;
    const kvcache::HostTierStats& h = *tiers.host;
    t.bytes->Set(static_cast<double>(h.bytes_used));
    t.capacity->Set(static_cast<double>(h.capacity_bytes));
    t.entries->Set(static_cast<double>(h.num_entries));
    t.hits.Follow(h.hits);
    t.misses.Follow(h.misses);
    t.stored.Follow(h.bytes_in);
    t.loaded.Follow(h.bytes_out);
    t.evictions.Follow(h.evictions);
    t.dropped.Follow(tiers.dropped_entries + h.refused);
    t.load_seconds.Follow(tiers.host_load_latency);
  }
  if (s_->disk.has_value() && tiers.disk.has_value()) {
    TierSeries& t = *s_->disk;
    const kvcache::DiskTierStats& d = *tiers.disk;
    t.bytes->Set(static_cast<double>(d.bytes_used));
    t.capacity->Set(static_cast<double>(d.capacity_bytes));
    t.entries->Set(static_cast<double>(d.num_entries));
    t.hits.Follow(d.hits);
    t.misses.Follow(d.misses);
    t.stored.Follow(d.bytes_written);
    t.loaded.Follow(d.bytes_read);
    t.evictions.Follow(d.evictions);
    t.dropped.Follow(d.dropped_puts + d.refused_puts);
    t.write_failures.Follow(d.write_failures);
    t.corrupt.Follow(d.corrupt_entries);
    t.load_seconds.Follow(d.load_latency);
  }
  s_->hit_tokens.Follow(scheduler.num_tier_hit_tokens);
  s_->load_failures.Follow(scheduler.num_tier_load_failures);
}

}  // namespace strata::server
