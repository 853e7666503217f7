// A Prometheus counter that follows a running total read from a snapshot (the engine's stats,
// the image inputs' stats): at each scrape it advances by what the total grew. Not thread-safe:
// its owner sets it one scrape at a time.
#pragma once

#include <algorithm>

#include "prometheus/counter.h"

namespace strata::server {

struct TotalCounter {
  prometheus::Counter* counter = nullptr;  // null: not exported, Follow does nothing
  double last = 0;
  void Follow(double total) {
    if (counter == nullptr) return;
    if (total > last) counter->Increment(total - last);
    last = std::max(last, total);
  }
};

}  // namespace strata::server
