#include "engine/expert_quantize.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "core/mxfp4_quantize.h"
#include "core/status.h"
#include "engine/weight_copy.h"
#include "kernels/cpu/thread_pool.h"
#include "kvcache/memory_planner.h"

namespace strata::engine {
namespace {

// One weight to quantise and where its codes and scales go in the buffer.
struct Job {
  Linear* w = nullptr;
  std::string name;  // the checkpoint tensor, for messages
  size_t packed_offset = 0;
  size_t scale_offset = 0;
};

constexpr int64_t kRowsPerTask = 64;
constexpr auto kProgressEvery = std::chrono::seconds(10);

size_t Aligned(size_t bytes) {
  return (bytes + AlignedBuffer::kAlignment - 1) / AlignedBuffer::kAlignment *
         AlignedBuffer::kAlignment;
}

// The routed-expert weights to quantise, laid out in the buffer; `*total` is its size.
absl::StatusOr<std::vector<Job>> PlanJobs(const ModelConfig& cfg, ModelWeights& weights,
                                          const std::vector<bool>& routed_experts, size_t* total) {
  std::vector<Job> jobs;
  *total = 0;
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    MoeWeights* moe = weights.layers[l].moe.get();
    if (moe == nullptr) continue;
    for (size_t e = 0; e < moe->experts.size(); ++e) {
      if (!routed_experts.empty() && (e >= routed_experts.size() || !routed_experts[e])) continue;
      ExpertWeights& x = moe->experts[e];
      for (auto [part, w] : {std::pair{"w1", &x.w1}, {"w3", &x.w3}, {"w2", &x.w2}}) {
        if (w->empty() || w->format == WeightFormat::kMxfp4) continue;
        Job job{
            w, RoutedExpertWeightName(cfg, static_cast<int64_t>(l), static_cast<int64_t>(e), part)};
        RETURN_IF_ERROR(CheckMxfp4Width(job.name, w->in_features));
        job.packed_offset = *total;
        *total += Aligned(static_cast<size_t>(w->out_features * w->in_features / 2));
        job.scale_offset = *total;
        *total += Aligned(static_cast<size_t>(w->out_features * w->in_features / kMxfp4BlockSize));
        jobs.push_back(std::move(job));
      }
    }
  }
  return jobs;
}

}  // namespace

std::string RoutedExpertWeightName(const ModelConfig& cfg, int64_t layer, int64_t expert,
                                   std::string_view part) {
  return absl::StrCat(cfg.tensor_prefix, "model.layers.", layer, ".block_sparse_moe.experts.",
                      expert, ".", std::string(part), ".weight");
}

absl::Status CheckMxfp4Width(const std::string& tensor, int64_t in_features) {
  if (in_features % kMxfp4BlockSize == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(tensor,
                   ": MXFP4 needs routed experts whose input width is a multiple of 32 (one E8M0 "
                   "scale per 32 inputs); this one is ",
                   in_features));
}

absl::Status QuantizeMxfp4Matrix(const std::string& tensor, DType dtype, const void* values,
                                 int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales) {
  const size_t row_bytes = static_cast<size_t>(cols) * DTypeSize(dtype);
  const auto* src = static_cast<const uint8_t*>(values);
  std::atomic<int64_t> bad_row{std::numeric_limits<int64_t>::max()};
  const int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  kernels::cpu::ParallelFor(tasks, tasks > 1, [&](int64_t t) {
    const int64_t end = std::min(rows, (t + 1) * kRowsPerTask);
    for (int64_t r = t * kRowsPerTask; r < end; ++r) {
      if (!QuantizeMxfp4Row(dtype, src + r * row_bytes, cols, packed + r * cols / 2,
                            scales + r * cols / kMxfp4BlockSize)) {
        int64_t seen = bad_row.load();
        while (r < seen && !bad_row.compare_exchange_weak(seen, r)) {
        }
        return;
      }
    }
  });
  const int64_t bad = bad_row.load();
  if (bad == std::numeric_limits<int64_t>::max()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(tensor, ": row ", bad,
                   " holds an infinite or NaN value, which MXFP4 cannot represent; the "
                   "checkpoint is damaged"));
}

absl::StatusOr<ExpertQuantization> QuantizeRoutedExperts(const ModelConfig& cfg,
                                                         ModelWeights* weights,
                                                         const std::vector<bool>& routed_experts) {
  CHECK_EQ(weights->quantized_experts.size(), 0u) << "experts quantised twice";
  size_t total = 0;
  ASSIGN_OR_RETURN(std::vector<Job> jobs, PlanJobs(cfg, *weights, routed_experts, &total));
  ExpertQuantization result;
  if (jobs.empty()) return result;
  if (std::optional<int64_t> available = AvailableHostMemoryBytes();
      available && static_cast<int64_t>(total) > *available) {
    return absl::ResourceExhaustedError(
        absl::StrCat("--quantization mxfp4: the routed experts' MXFP4 weights need ",
                     kvcache::FormatBytes(static_cast<int64_t>(total)), " and the host has ",
                     kvcache::FormatBytes(*available), " available"));
  }
  weights->quantized_experts = AlignedBuffer(total, AlignedBuffer::Fill::kUninitialized);
  auto* base = weights->quantized_experts.as<uint8_t>();

  // Big checkpoints take minutes here (Kimi-Linear-48B: 90 GB of bf16 experts): say how far.
  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = jobs[j];
    const Linear& w = *job.w;
    if (const auto now = std::chrono::steady_clock::now(); now - last_report > kProgressEvery) {
      LOG_INFO("engine", "--quantization mxfp4: {} of {} routed-expert weights, {:.0f} s", j,
               jobs.size(), std::chrono::duration<double>(now - start).count());
      last_report = now;
    }
    const DType dtype = w.format == WeightFormat::kBf16 ? DType::kBF16 : DType::kF32;
    if (absl::Status s = QuantizeMxfp4Matrix(job.name, dtype, w.data, w.out_features, w.in_features,
                                             base + job.packed_offset, base + job.scale_offset);
        !s.ok()) {
      weights->quantized_experts = AlignedBuffer();
      return s;
    }
    if (w.owned.size() == 0) {  // read from the checkpoint's mapping: not needed again
      ReleaseMappedPages(w.data, static_cast<size_t>(w.data_bytes()));
    }
  }
  for (Job& job : jobs) {
    Linear& w = *job.w;
    result.matrices += 1;
    result.source_bytes += w.num_bytes();
    w.format = WeightFormat::kMxfp4;
    w.data = base + job.packed_offset;
    w.scales = base + job.scale_offset;
    w.owned = AlignedBuffer();
    result.quantized_bytes += w.num_bytes();
  }
  return result;
}

}  // namespace strata::engine
