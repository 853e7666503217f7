// The offload copies of a step (engine/step.h, StepPlan::cache_saves / cache_loads), for any
// executor: every save into result->saved, then every load, span by span. The executor gives
// the byte copies (host memcpy, cudaMemcpy): copy_out(offset, bytes, char* to) reads `bytes` of
// its arena at `offset`; copy_in(const char* from, offset, bytes) writes them. A load whose
// bytes are not exactly its unit's size is a CHECK failure (the scheduler checks sizes first).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/check.h"
#include "core/status.h"
#include "engine/step.h"
#include "kvcache/cache_layout.h"

namespace strata::engine {

template <typename CopyOut, typename CopyIn>
absl::Status CopyCacheUnits(const StepPlan& plan, const kvcache::CacheLayout& layout,
                            StepResult* result, std::vector<kvcache::CacheSpan>* spans,
                            CopyOut copy_out, CopyIn copy_in) {
  result->saved.resize(plan.cache_saves.size());
  for (size_t i = 0; i < plan.cache_saves.size(); ++i) {
    CacheUnitSpans(layout, plan.cache_saves[i].unit, plan.cache_saves[i].index, spans);
    std::string& out = result->saved[i];
    out.clear();
    for (const kvcache::CacheSpan& span : *spans) {
      const size_t at = out.size();
      out.resize(at + static_cast<size_t>(span.bytes));
      RETURN_IF_ERROR(copy_out(span.offset, span.bytes, out.data() + at));
    }
  }
  for (const CacheLoad& load : plan.cache_loads) {
    CacheUnitSpans(layout, load.unit, load.index, spans);
    size_t at = 0;
    for (const kvcache::CacheSpan& span : *spans) {
      CHECK_LE(at + static_cast<size_t>(span.bytes), load.bytes.size()) << "cache load too short";
      RETURN_IF_ERROR(copy_in(load.bytes.data() + at, span.offset, span.bytes));
      at += static_cast<size_t>(span.bytes);
    }
    CHECK_EQ(at, load.bytes.size()) << "cache load of the wrong size";
  }
  return absl::OkStatus();
}

}  // namespace strata::engine
