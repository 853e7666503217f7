// Prometheus series of the vision encoder (docs/vision.md), set at each scrape from the image
// inputs' stats (frontend::ImageInputs::stats, copied into EncoderCounts by the serve command);
// exported only by a model with a vision tower.
//
//   gauges    strata:encoder_queue_images          images waiting for the encoder thread
//             strata:encoder_running_images        images it is encoding now (0 or 1)
//             strata:encoder_cache_bytes           the tower's rows kept for reuse
//             strata:encoder_cache_capacity_bytes  what that cache may hold
//   counters  strata:images_encoded_total          tower runs
//             strata:image_encode_seconds_total    their time, waits for the encoder budget
//                                                  excluded (÷ images_encoded_total: the mean)
//             strata:encoder_cache_hits_total      images served from the cache
//
// Thread-safe (one scrape at a time sets them).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace strata::server {

struct EncoderCounts {
  int64_t queue_images = 0;    // now
  int64_t running_images = 0;  // now
  int64_t cache_bytes = 0;     // now
  int64_t cache_capacity_bytes = 0;
  int64_t images_encoded = 0;  // totals since the start
  double encode_seconds = 0;
  int64_t cache_hits = 0;
};

class VisionMetrics {
 public:
  // Registers the series when `on` (the model has a vision tower).
  VisionMetrics(prometheus::Registry& registry, bool on);
  ~VisionMetrics();
  VisionMetrics(const VisionMetrics&) = delete;
  VisionMetrics& operator=(const VisionMetrics&) = delete;

  void Set(const EncoderCounts& counts);

 private:
  struct Series;
  std::unique_ptr<Series> s_;
  std::mutex mu_;
};

}  // namespace strata::server
