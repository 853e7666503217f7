// The offload copies of a step (engine/step.h, StepPlan::cache_saves / cache_loads), for any
// executor: every save into result->saved, then every load, span by span. The executor gives
// the byte copies (host memcpy, cudaMemcpy): copy_out(offset, bytes, char* to) reads `bytes` of
// its arena at `offset`; copy_in(const CacheLoad& load, const char* from, offset, bytes) writes
// them (`load` says where the copy may run: CacheLoad::beside_step). A load whose
// bytes are not exactly its unit's size (times its shares) is a CHECK failure (the scheduler
// checks sizes first).
//
// Under tensor parallelism a unit is spread over the group's ranks (CacheShares): a tier entry
// holds each distinct share once, in order, and is kept by the lead alone (its scheduler decides
// what is saved and loaded). Each rank copies its own share out and GatherSavedShares brings the
// shares to the lead; a load carries the whole entry to every rank (the step plan) and each
// copies its own share in.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/check.h"
#include "core/status.h"
#include "engine/step.h"
#include "engine/tensor_parallel.h"
#include "kvcache/cache_layout.h"

namespace strata::engine {

// Which share of an offload unit a rank of a tensor-parallel group holds. A block's latent rows
// are split over the C context-parallel ranks by position and replicated over the T / C groups
// (engine/tensor_parallel.h), so a block has C distinct shares, rank r's being r mod C; a state
// row holds the rank's KDA heads, so it has T shares, rank r's being r. One rank: one share.
struct CacheShares {
  int rank = 0;
  int tensor_parallel_size = 1;
  int context_parallel_size = 1;
  int Count(CacheUnit unit) const {
    return unit == CacheUnit::kBlock ? context_parallel_size : tensor_parallel_size;
  }
  int Index(CacheUnit unit) const {
    return unit == CacheUnit::kBlock ? rank % context_parallel_size : rank;
  }
};

// Bytes of a unit: the sum of its spans.
inline size_t SpanBytes(const std::vector<kvcache::CacheSpan>& spans) {
  size_t bytes = 0;
  for (const kvcache::CacheSpan& span : spans) bytes += static_cast<size_t>(span.bytes);
  return bytes;
}

template <typename CopyOut, typename CopyIn>
absl::Status CopyCacheUnits(const StepPlan& plan, const kvcache::CacheLayout& layout,
                            StepResult* result, std::vector<kvcache::CacheSpan>* spans,
                            CopyOut copy_out, CopyIn copy_in, const CacheShares& shares = {}) {
  result->saved.resize(plan.cache_saves.size());
  for (size_t i = 0; i < plan.cache_saves.size(); ++i) {
    CacheUnitSpans(layout, plan.cache_saves[i].unit, plan.cache_saves[i].index, spans);
    std::string& out = result->saved[i];
    // Sized once: the pointers copy_out gets stay valid until result->saved changes (an
    // asynchronous copy may land there after this returns).
    out.resize(SpanBytes(*spans));
    size_t at = 0;
    for (const kvcache::CacheSpan& span : *spans) {
      RETURN_IF_ERROR(copy_out(span.offset, span.bytes, out.data() + at));
      at += static_cast<size_t>(span.bytes);
    }
  }
  for (const CacheLoad& load : plan.cache_loads) {
    CacheUnitSpans(layout, load.unit, load.index, spans);
    const size_t unit_bytes = SpanBytes(*spans);
    CHECK_EQ(unit_bytes * static_cast<size_t>(shares.Count(load.unit)), load.bytes.size())
        << "cache load of the wrong size";
    size_t at = unit_bytes * static_cast<size_t>(shares.Index(load.unit));
    for (const kvcache::CacheSpan& span : *spans) {
      RETURN_IF_ERROR(copy_in(load, load.bytes.data() + at, span.offset, span.bytes));
      at += static_cast<size_t>(span.bytes);
    }
  }
  return absl::OkStatus();
}

// After CopyCacheUnits on every rank of `group` (each saved its own share): the lead's
// result->saved[i] becomes the unit's distinct shares in order (CacheShares); the others' stay
// their own. One all-gather per saved unit (`scratch` is kept between steps).
inline void GatherSavedShares(TensorParallelGroup& group, const CacheShares& shares,
                              const StepPlan& plan, StepResult* result,
                              std::vector<float>* scratch) {
  for (size_t i = 0; i < plan.cache_saves.size(); ++i) {
    std::string& saved = result->saved[i];
    const size_t bytes = saved.size();  // the same on every rank (one layout for the group)
    const int64_t words = static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
    scratch->assign(static_cast<size_t>(words * (1 + group.size())), 0.0f);
    std::memcpy(scratch->data(), saved.data(), bytes);
    group.AllGather(scratch->data(), words, scratch->data() + words);
    if (group.rank() != 0) continue;
    const int count = shares.Count(plan.cache_saves[i].unit);
    saved.resize(bytes * static_cast<size_t>(count));
    for (int r = 0; r < count; ++r) {
      std::memcpy(saved.data() + bytes * static_cast<size_t>(r), scratch->data() + words * (1 + r),
                  bytes);
    }
  }
}

}  // namespace strata::engine
