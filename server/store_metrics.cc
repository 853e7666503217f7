// store_metrics.h: gauge families registered once, set from the stores' counts.
#include "server/store_metrics.h"

#include <string>
#include <vector>

#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace strata::server {
namespace {

constexpr const char* kBatchStatuses[] = {"validating", "in_progress", "finalizing", "completed",
                                          "failed",     "cancelling",  "cancelled",  "expired"};

prometheus::Gauge* Single(prometheus::Registry& registry, const char* name, const char* help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

}  // namespace

struct StoreMetrics::Gauges {
  // Batches (null when the Files and Batches API is off).
  std::vector<std::pair<std::string, prometheus::Gauge*>> batches;  // by status
  prometheus::Gauge* batch_requests_pending = nullptr;
  prometheus::Gauge* files_bytes = nullptr;
  prometheus::Gauge* files_capacity_bytes = nullptr;
  // Responses (null when no response is stored).
  prometheus::Gauge* stored_responses = nullptr;
  prometheus::Gauge* stored_responses_bytes = nullptr;
  prometheus::Gauge* stored_responses_capacity_bytes = nullptr;
  prometheus::Gauge* background_responses_running = nullptr;
};

StoreMetrics::StoreMetrics(prometheus::Registry& registry, bool batches_on, bool responses_on)
    : g_(std::make_unique<Gauges>()) {
  if (batches_on) {
    auto& family = prometheus::BuildGauge()
                       .Name("strata:batches")
                       .Help("Batches (/v1/batches) by status")
                       .Register(registry);
    for (const char* status : kBatchStatuses) {
      g_->batches.emplace_back(status, &family.Add({{"status", status}}));
    }
    g_->batch_requests_pending =
        Single(registry, "strata:batch_requests_pending",
               "Requests of unfinished batches not answered yet (the batch backlog)");
    g_->files_bytes = Single(registry, "strata:files_bytes", "Bytes of /v1/files held");
    g_->files_capacity_bytes = Single(registry, "strata:files_capacity_bytes",
                                      "Bytes /v1/files may hold (--files-store-memory)");
  }
  if (responses_on) {
    g_->stored_responses =
        Single(registry, "strata:stored_responses",
               "Responses kept for GET /v1/responses/{id} and previous_response_id");
    g_->stored_responses_bytes =
        Single(registry, "strata:stored_responses_bytes", "Bytes of the stored responses");
    g_->stored_responses_capacity_bytes =
        Single(registry, "strata:stored_responses_capacity_bytes",
               "Bytes the stored responses may take (--responses-store-memory)");
    g_->background_responses_running =
        Single(registry, "strata:background_responses_running",
               "Background responses (/v1/responses, background: true) queued or generating");
  }
}

StoreMetrics::~StoreMetrics() = default;

void StoreMetrics::Set(const BatchCounts& batches, const ResponseCounts& responses) {
  for (const auto& [status, gauge] : g_->batches) {
    const auto it = batches.batches_by_status.find(status);
    gauge->Set(it == batches.batches_by_status.end() ? 0.0 : static_cast<double>(it->second));
  }
  if (g_->batch_requests_pending != nullptr) {
    g_->batch_requests_pending->Set(static_cast<double>(batches.requests_pending));
    g_->files_bytes->Set(static_cast<double>(batches.files_bytes));
    g_->files_capacity_bytes->Set(static_cast<double>(batches.files_capacity_bytes));
  }
  if (g_->stored_responses != nullptr) {
    g_->stored_responses->Set(static_cast<double>(responses.stored));
    g_->stored_responses_bytes->Set(static_cast<double>(responses.bytes));
    g_->stored_responses_capacity_bytes->Set(static_cast<double>(responses.capacity_bytes));
    g_->background_responses_running->Set(static_cast<double>(responses.background_running));
  }
}

}  // namespace strata::server
