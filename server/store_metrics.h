// Per-process gauges of what a server keeps for its clients beyond one request: the Files and
// Batches API (`--files-store-memory`, `--files-dir`) and stored / background responses
// (`--responses-store-memory`, `--responses-dir`). They are set from those stores' counts at
// each scrape (Set), so a dashboard sees a batch backlog or a store near its bound.
//
//   strata:batches{status}                batches by status: validating, in_progress,
//                                         finalizing, completed, failed, cancelling,
//                                         cancelled, expired (each exported, 0 where none)
//   strata:batch_requests_pending         requests of unfinished batches not answered yet
//   strata:files_bytes                    bytes of /v1/files held
//   strata:files_capacity_bytes           --files-store-memory
//   strata:stored_responses               responses kept for GET and previous_response_id
//   strata:stored_responses_bytes         their bytes
//   strata:stored_responses_capacity_bytes  --responses-store-memory
//   strata:background_responses_running   background responses queued or generating
//
// A store that is off exports nothing. Thread-safe (gauges are atomics).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace strata::server {

struct BatchCounts {
  std::map<std::string, int64_t> batches_by_status;  // statuses with no batch may be absent
  int64_t requests_pending = 0;
  int64_t files_bytes = 0;
  int64_t files_capacity_bytes = 0;
};

struct ResponseCounts {
  int64_t stored = 0;
  int64_t bytes = 0;
  int64_t capacity_bytes = 0;
  int64_t background_running = 0;
};

class StoreMetrics {
 public:
  // Registers the series of the stores that are on (`batches_on`, `responses_on`).
  StoreMetrics(prometheus::Registry& registry, bool batches_on, bool responses_on);
  ~StoreMetrics();
  StoreMetrics(const StoreMetrics&) = delete;
  StoreMetrics& operator=(const StoreMetrics&) = delete;

  // Each argument is ignored where its store is off.
  void Set(const BatchCounts& batches, const ResponseCounts& responses);

 private:
  struct Gauges;
  std::unique_ptr<Gauges> g_;
};

}  // namespace strata::server
