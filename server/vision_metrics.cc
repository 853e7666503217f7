// vision_metrics.h: gauges from the stats' "now" values, counters following their totals.
#include "server/vision_metrics.h"

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "server/total_counter.h"

namespace strata::server {

struct VisionMetrics::Series {
  prometheus::Gauge* queue_images = nullptr;
  prometheus::Gauge* running_images = nullptr;
  prometheus::Gauge* cache_bytes = nullptr;
  prometheus::Gauge* cache_capacity_bytes = nullptr;
  TotalCounter images_encoded, encode_seconds, cache_hits;
};

VisionMetrics::VisionMetrics(prometheus::Registry& registry, bool on)
    : s_(std::make_unique<Series>()) {
  if (!on) return;
  const auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
  };
  const auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
  };
  s_->queue_images =
      gauge("strata:encoder_queue_images", "Images waiting for the vision encoder thread");
  s_->running_images =
      gauge("strata:encoder_running_images", "Images the vision encoder is encoding now");
  s_->cache_bytes = gauge("strata:encoder_cache_bytes", "Bytes of vision rows kept for reuse");
  s_->cache_capacity_bytes =
      gauge("strata:encoder_cache_capacity_bytes", "Bytes the cache of vision rows may hold");
  s_->images_encoded.counter =
      counter("strata:images_encoded_total", "Images the vision tower encoded");
  s_->encode_seconds.counter = counter(
      "strata:image_encode_seconds_total",
      "Time the vision tower spent encoding images (waits for the encoder budget excluded)");
  s_->cache_hits.counter =
      counter("strata:encoder_cache_hits_total", "Images served from the cache of vision rows");
}

VisionMetrics::~VisionMetrics() = default;

void VisionMetrics::Set(const EncoderCounts& counts) {
  std::lock_guard<std::mutex> lock(mu_);
  if (s_->queue_images == nullptr) return;
  s_->queue_images->Set(static_cast<double>(counts.queue_images));
  s_->running_images->Set(static_cast<double>(counts.running_images));
  s_->cache_bytes->Set(static_cast<double>(counts.cache_bytes));
  s_->cache_capacity_bytes->Set(static_cast<double>(counts.cache_capacity_bytes));
  s_->images_encoded.Follow(static_cast<double>(counts.images_encoded));
  s_->encode_seconds.Follow(counts.encode_seconds);
  s_->cache_hits.Follow(static_cast<double>(counts.cache_hits));
}

}  // namespace strata::server
