// Moves a loaded model's streamed weights out of the checkpoint's memory-mapped files into one
// anonymous buffer advised to transparent huge pages (AlignedBuffer ≥ 2 MiB).
//
// Why: a CPU decode step streams every dense weight and the routed experts' once per step. Out
// of the page cache those reads cross a 4 KiB page (a TLB miss, and the hardware prefetchers
// stop) every 4 KiB; from 2 MiB pages they do not. Measured on the bench model (Kimi-Linear
// shape, 1.3 GiB of bf16 weights, 2 threads, 4 interleaved runs each): decode 56.6 tokens/s
// against 50.9 from the mapping (+11 %). The cost: a copy at load (+1.4 s for those 1.3 GiB on
// that VM, mostly the kernel zeroing fresh huge pages) and memory no longer shared with other
// processes mapping the same files (`strata serve --mmap-weights` keeps the mapping).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "engine/model_weights.h"

namespace strata::engine {

// Copies into `*arena` every non-empty Linear that still points into the mapping (bf16 and f32
// data, MXFP4 packed bytes and scales; weights converted or quantised at load own their memory)
// and points the Linears at the copies. The embedding table stays mapped unless the LM head
// shares it (a token reads one row of it). Views of the same bytes (tied LM head) get one
// copy. The mapping's pages of copied weights are released from this process (MADV_DONTNEED;
// a later read through the mapping faults them back from the file). Copies nothing when the
// copy needs more than `max_bytes` (nullopt: no limit).
//
// `routed_experts` (empty: all): with expert parallelism a process runs only its ranks'
// experts, so only routed experts e with routed_experts[e] are copied; the others stay mapped
// and are never read (their pages are never faulted in).
struct WeightCopy {
  int64_t needed_bytes = 0;  // the copy's size
  int64_t copied_bytes = 0;  // needed_bytes, or 0 when over the limit
};
WeightCopy CopyMappedLinears(ModelWeights& weights, std::optional<int64_t> max_bytes,
                             AlignedBuffer* arena, const std::vector<bool>& routed_experts = {});

// Drops this process's pages of the whole pages inside [p, p + bytes) of a read-only mapping (a
// later read faults them back from the file).
void ReleaseMappedPages(const void* p, size_t bytes);

// The bytes CopyMappedLinears would copy.
int64_t MappedLinearBytes(const ModelWeights& weights,
                          const std::vector<bool>& routed_experts = {});

}  // namespace strata::engine
