#include "engine/weight_quantize.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/host_memory.h"
#include "core/int8_quantize.h"
#include "core/log.h"
#include "core/mxfp4_quantize.h"
#include "core/status.h"
#include "engine/weight_copy.h"
#include "kernels/cpu/thread_pool.h"
#include "kvcache/memory_planner.h"

namespace strata::engine {
namespace {

enum class Target { kMxfp4, kInt8 };

// One weight to quantise and where its codes and scales go in the buffer.
struct Job {
  Linear* w = nullptr;
  std::string name;  // the checkpoint tensor, for messages
  size_t data_offset = 0;
  size_t scale_offset = 0;
};

constexpr int64_t kRowsPerTask = 64;
constexpr auto kProgressEvery = std::chrono::seconds(10);

size_t Aligned(size_t bytes) {
  return (bytes + AlignedBuffer::kAlignment - 1) / AlignedBuffer::kAlignment *
         AlignedBuffer::kAlignment;
}

size_t CodeBytes(Target target, const Linear& w) {
  const auto count = static_cast<size_t>(w.out_features * w.in_features);
  return target == Target::kMxfp4 ? count / 2 : count;
}

size_t ScaleBytes(Target target, const Linear& w) {
  if (target == Target::kMxfp4) {  // one E8M0 byte per group
    return static_cast<size_t>(w.out_features * (w.in_features / kMxfp4BlockSize));
  }
  return static_cast<size_t>(w.out_features * (w.in_features / kInt8GroupSize)) * 2;  // bf16
}

// Places `job` at the end of the buffer of `*total` bytes.
void Place(Target target, Job& job, size_t* total) {
  job.data_offset = *total;
  *total += Aligned(CodeBytes(target, *job.w));
  job.scale_offset = *total;
  *total += Aligned(ScaleBytes(target, *job.w));
}

// Runs quantise_row(r) for every row in parallel; InvalidArgument naming `tensor` and the first
// row for which it returned false (a value that is infinite or NaN).
absl::Status QuantizeRows(const std::string& tensor, const char* format, int64_t rows,
                          const std::function<bool(int64_t)>& quantise_row) {
  std::atomic<int64_t> bad_row{std::numeric_limits<int64_t>::max()};
  const int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  kernels::cpu::ParallelFor(tasks, tasks > 1, [&](int64_t t) {
    const int64_t end = std::min(rows, (t + 1) * kRowsPerTask);
    for (int64_t r = t * kRowsPerTask; r < end; ++r) {
      if (!quantise_row(r)) {
        int64_t seen = bad_row.load();
        while (r < seen && !bad_row.compare_exchange_weak(seen, r)) {
        }
        return;
      }
    }
  });
  const int64_t bad = bad_row.load();
  if (bad == std::numeric_limits<int64_t>::max()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(tensor, ": row ", bad,
                                                 " holds an infinite or NaN value, which ", format,
                                                 " cannot represent; the checkpoint is damaged"));
}

// Quantises `jobs` (placed in `total` bytes) into a new buffer of weights->quantized and points
// their Linears there. `flag` names the option in messages.
absl::StatusOr<QuantizationResult> RunJobs(Target target, const char* flag, std::vector<Job>& jobs,
                                           size_t total, ModelWeights* weights) {
  QuantizationResult result;
  if (jobs.empty()) return result;
  if (std::optional<int64_t> available = AvailableHostMemoryBytes();
      available && static_cast<int64_t>(total) > *available) {
    return absl::ResourceExhaustedError(absl::StrCat(
        flag, ": the quantised weights need ", kvcache::FormatBytes(static_cast<int64_t>(total)),
        " and the host has ", kvcache::FormatBytes(*available), " available"));
  }
  AlignedBuffer buffer(total, AlignedBuffer::Fill::kUninitialized);
  auto* base = buffer.as<uint8_t>();

  // Big checkpoints take minutes here (Kimi-Linear-48B: 90 GB of bf16 experts): say how far.
  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = jobs[j];
    const Linear& w = *job.w;
    if (const auto now = std::chrono::steady_clock::now(); now - last_report > kProgressEvery) {
      LOG_INFO("engine", "{}: {} of {} weights, {:.0f} s", flag, j, jobs.size(),
               std::chrono::duration<double>(now - start).count());
      last_report = now;
    }
    const DType dtype = w.format == WeightFormat::kBf16 ? DType::kBF16 : DType::kF32;
    RETURN_IF_ERROR(target == Target::kMxfp4
                        ? QuantizeMxfp4Matrix(job.name, dtype, w.data, w.out_features,
                                              w.in_features, base + job.data_offset,
                                              base + job.scale_offset)
                        : QuantizeInt8Matrix(job.name, dtype, w.data, w.out_features, w.in_features,
                                             reinterpret_cast<int8_t*>(base + job.data_offset),
                                             reinterpret_cast<uint16_t*>(base + job.scale_offset)));
    // Read from the checkpoint's mapping and not needed again (a tied LM head's bytes are the
    // embedding's, still read).
    if (w.owned.size() == 0 && w.data != weights->embed.data) {
      ReleaseMappedPages(w.data, static_cast<size_t>(w.data_bytes()));
    }
  }
  for (Job& job : jobs) {
    Linear& w = *job.w;
    result.matrices += 1;
    result.source_bytes += w.num_bytes();
    w.format = target == Target::kMxfp4 ? WeightFormat::kMxfp4 : WeightFormat::kInt8;
    w.data = base + job.data_offset;
    w.scales = base + job.scale_offset;
    w.owned = AlignedBuffer();
    result.quantized_bytes += w.num_bytes();
  }
  weights->quantized.push_back(std::move(buffer));
  return result;
}

bool Quantisable(const Linear& w) {
  return !w.empty() && (w.format == WeightFormat::kBf16 || w.format == WeightFormat::kF32);
}

bool ThisProcessRuns(const std::vector<bool>& routed_experts, size_t e) {
  return routed_experts.empty() || (e < routed_experts.size() && routed_experts[e]);
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

absl::Status QuantizeInt8Matrix(const std::string& tensor, DType dtype, const void* values,
                                int64_t rows, int64_t cols, int8_t* codes, uint16_t* scales) {
  const size_t row_bytes = static_cast<size_t>(cols) * DTypeSize(dtype);
  const auto* src = static_cast<const uint8_t*>(values);
  return QuantizeRows(tensor, "int8", rows, [&](int64_t r) {
    return QuantizeInt8Row(dtype, src + r * row_bytes, cols, codes + r * cols,
                           scales + r * (cols / kInt8GroupSize));
  });
}

absl::Status QuantizeMxfp4Matrix(const std::string& tensor, DType dtype, const void* values,
                                 int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales) {
  const size_t row_bytes = static_cast<size_t>(cols) * DTypeSize(dtype);
  const auto* src = static_cast<const uint8_t*>(values);
  return QuantizeRows(tensor, "MXFP4", rows, [&](int64_t r) {
    return QuantizeMxfp4Row(dtype, src + r * row_bytes, cols, packed + r * cols / 2,
                            scales + r * cols / kMxfp4BlockSize);
  });
}

absl::StatusOr<QuantizationResult> QuantizeRoutedExperts(const ModelConfig& cfg,
                                                         ModelWeights* weights,
                                                         const std::vector<bool>& routed_experts) {
  std::vector<Job> jobs;
  size_t total = 0;
  for (size_t l = 0; l < weights->layers.size(); ++l) {
    MoeWeights* moe = weights->layers[l].moe.get();
    if (moe == nullptr) continue;
    for (size_t e = 0; e < moe->experts.size(); ++e) {
      if (!ThisProcessRuns(routed_experts, e)) continue;
      ExpertWeights& x = moe->experts[e];
      for (auto [part, w] : {std::pair{"w1", &x.w1}, {"w3", &x.w3}, {"w2", &x.w2}}) {
        if (!Quantisable(*w)) continue;
        Job job{
            w, RoutedExpertWeightName(cfg, static_cast<int64_t>(l), static_cast<int64_t>(e), part)};
        RETURN_IF_ERROR(CheckMxfp4Width(job.name, w->in_features));
        Place(Target::kMxfp4, job, &total);
        jobs.push_back(std::move(job));
      }
    }
  }
  return RunJobs(Target::kMxfp4, "--quantization mxfp4", jobs, total, weights);
}

std::vector<Linear*> Int8Targets(ModelWeights* weights, const std::vector<bool>& routed_experts,
                                 int64_t* kept_odd_width) {
  // Kept as stored whatever their format (see the header); routed experts this process does not
  // run are never read here.
  std::set<const Linear*> keep;
  for (size_t l = 0; l < weights->layers.size(); ++l) {
    LayerWeights& layer = weights->layers[l];
    if (layer.mla) keep.insert(&layer.mla->kv_b_proj);
    if (!layer.moe) continue;
    keep.insert(&layer.moe->router);
    for (size_t e = 0; e < layer.moe->experts.size(); ++e) {
      if (ThisProcessRuns(routed_experts, e)) continue;
      ExpertWeights& x = layer.moe->experts[e];
      keep.insert({&x.w1, &x.w3, &x.w2});
    }
  }
  std::vector<Linear*> targets;
  ForEachLinear(*weights, [&](Linear& w, LinearRole role) {
    if (role == LinearRole::kEmbedding || keep.contains(&w) || !Quantisable(w)) return;
    if (w.in_features % kInt8GroupSize != 0) {
      ++*kept_odd_width;
      return;
    }
    targets.push_back(&w);
  });
  return targets;
}

std::map<const void*, std::string> TensorNamesByData(const Checkpoint& ckpt) {
  std::map<const void*, std::string> names;
  for (const std::string& name : ckpt.TensorNames()) {
    if (absl::StatusOr<const TensorInfo*> t = ckpt.Find(name); t.ok()) names[(*t)->data] = name;
  }
  return names;
}

absl::StatusOr<QuantizationResult> QuantizeLinearsInt8(const Checkpoint& ckpt,
                                                       ModelWeights* weights,
                                                       const std::vector<bool>& routed_experts) {
  const std::map<const void*, std::string> names = TensorNamesByData(ckpt);  // for messages
  std::vector<Job> jobs;
  size_t total = 0;
  int64_t kept_odd_width = 0;
  for (Linear* w : Int8Targets(weights, routed_experts, &kept_odd_width)) {
    const auto name = names.find(w->data);
    Job job{w, name != names.end() ? name->second
                                   : absl::StrCat("a ", w->out_features, "x", w->in_features,
                                                  " weight converted at load")};
    Place(Target::kInt8, job, &total);
    jobs.push_back(std::move(job));
  }
  ASSIGN_OR_RETURN(QuantizationResult done,
                   RunJobs(Target::kInt8, "--quantization int8", jobs, total, weights));
  done.kept_odd_width = kept_odd_width;
  return done;
}

}  // namespace strata::engine
