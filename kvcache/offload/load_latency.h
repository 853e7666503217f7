// Load latency of a tier as a small fixed histogram, ready for a Prometheus histogram export
// (cumulative buckets are the running sums of bucket_counts; the last bucket is +Inf).
#pragma once

#include <array>
#include <cstdint>

namespace strata::kvcache {

struct LoadLatency {
  // Upper bounds of the finite buckets, in seconds (Prometheus "le").
  static constexpr std::array<double, 7> kBucketUpperSeconds = {0.0005, 0.002, 0.008, 0.032,
                                                                0.128,  0.512, 2.048};

  int64_t count = 0;
  double sum_seconds = 0;
  // bucket_counts[i]: loads with kBucketUpperSeconds[i - 1] < seconds <= kBucketUpperSeconds[i];
  // the last element counts those above every bound.
  std::array<int64_t, kBucketUpperSeconds.size() + 1> bucket_counts{};

  void Record(double seconds) {
    ++count;
    sum_seconds += seconds;
    size_t bucket = 0;
    while (bucket < kBucketUpperSeconds.size() && seconds > kBucketUpperSeconds[bucket]) ++bucket;
    ++bucket_counts[bucket];
  }
};

}  // namespace strata::kvcache
