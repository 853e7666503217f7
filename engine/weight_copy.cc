#include "engine/weight_copy.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::engine {
namespace {

struct Range {
  const void* src = nullptr;
  size_t bytes = 0;
  size_t offset = 0;  // into the arena
};

// What CopyMappedLinears moves: the distinct mapped byte ranges, laid out in the arena.
struct CopyPlan {
  absl::flat_hash_set<const void*> owned;   // converted at load: not in the mapping
  absl::flat_hash_set<const void*> unused;  // routed experts this process never runs
  const void* lm_head_data = nullptr;
  std::vector<Range> ranges;
  absl::flat_hash_map<const void*, size_t> range_of;  // mapped bytes → their range
  size_t total = 0;

  bool Moves(const Linear& w, LinearRole role) const {
    return !w.empty() && !owned.contains(w.data) && !unused.contains(w.data) &&
           (role != LinearRole::kEmbedding || w.data == lm_head_data);
  }
};

CopyPlan PlanCopy(const ModelWeights& weights, const std::vector<bool>& routed_experts) {
  CopyPlan plan;
  ForEachLinear(weights, [&](const Linear& w, LinearRole) {
    if (w.owned.size() > 0 || weights.IsQuantizedAtLoad(w.data)) plan.owned.insert(w.data);
  });
  if (!routed_experts.empty()) {
    for (const LayerWeights& layer : weights.layers) {
      if (!layer.moe) continue;
      for (size_t e = 0; e < layer.moe->experts.size(); ++e) {
        if (e < routed_experts.size() && routed_experts[e]) continue;
        const ExpertWeights& x = layer.moe->experts[e];
        for (const Linear* w : {&x.w1, &x.w3, &x.w2}) {
          if (!w->empty()) plan.unused.insert(w->data);
        }
      }
    }
  }
  plan.lm_head_data = weights.lm_head.data;
  auto add = [&](const void* src, size_t bytes) {
    if (src == nullptr || bytes == 0 || plan.range_of.contains(src)) return;
    plan.range_of[src] = plan.ranges.size();
    plan.ranges.push_back({src, bytes, plan.total});
    plan.total += (bytes + AlignedBuffer::kAlignment - 1) / AlignedBuffer::kAlignment *
                  AlignedBuffer::kAlignment;
  };
  ForEachLinear(weights, [&](const Linear& w, LinearRole role) {
    if (!plan.Moves(w, role)) return;
    add(w.data, static_cast<size_t>(w.data_bytes()));
    add(w.scales, static_cast<size_t>(w.scale_bytes()));
  });
  return plan;
}

}  // namespace

void ReleaseMappedPages(const void* p, size_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

int64_t MappedLinearBytes(const ModelWeights& weights, const std::vector<bool>& routed_experts) {
  return static_cast<int64_t>(PlanCopy(weights, routed_experts).total);
}

WeightCopy CopyMappedLinears(ModelWeights& weights, std::optional<int64_t> max_bytes,
                             AlignedBuffer* arena, const std::vector<bool>& routed_experts) {
  const CopyPlan plan = PlanCopy(weights, routed_experts);
  const std::vector<Range>& ranges = plan.ranges;
  const size_t total = plan.total;
  const WeightCopy none{static_cast<int64_t>(total), 0};
  if (total == 0 || (max_bytes && static_cast<int64_t>(total) > *max_bytes)) return none;

  *arena = AlignedBuffer(total, AlignedBuffer::Fill::kUninitialized);
  char* base = arena->as<char>();
  kernels::cpu::ParallelFor(static_cast<int64_t>(ranges.size()), true, [&](int64_t i) {
    const Range& r = ranges[static_cast<size_t>(i)];
    std::memcpy(base + r.offset, r.src, r.bytes);
    ReleaseMappedPages(r.src, r.bytes);  // now, so the copy never holds both in full
  });
  auto copy_of = [&](const void* src) { return base + ranges[plan.range_of.at(src)].offset; };
  ForEachLinear(weights, [&](Linear& w, LinearRole role) {
    if (!plan.Moves(w, role)) return;
    w.data = copy_of(w.data);
    if (w.scales != nullptr) w.scales = reinterpret_cast<const uint8_t*>(copy_of(w.scales));
  });
  return {static_cast<int64_t>(total), static_cast<int64_t>(total)};
}

}  // namespace strata::engine
