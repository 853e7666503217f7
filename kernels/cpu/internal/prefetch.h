// Software prefetch of the weight slice a tile's task reads next (TileArgs::w_next).
//
// A decode tile reads nr weight rows × ≤1024 k in lockstep: short streams that the hardware
// prefetchers pick up late. Each tile instead prefetches, one cache line per row per step, the
// same offsets of the next slice, so DRAM runs one slice (4 rows × 2 KB bf16) ahead. Measured on
// one thread: m = 1 bf16 decode from 39–61 % to 81–90 % of the read ceiling (README.md).
// Into L2 (T1): the slice is used a few µs later and L1's fill buffers stay free for loads.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/internal/matmul_tiles.h"

namespace strata::kernels::cpu::internal {

// Prefetches byte `offset` of rows 0..NR-1 of the next slice; no-op when there is none.
template <int NR>
inline void PrefetchNextSlice(const void* const (&w_next)[kMaxTileCols], int64_t offset) {
  if (w_next[0] == nullptr) return;
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) {
    _mm_prefetch(static_cast<const char*>(w_next[j]) + offset, _MM_HINT_T1);
  }
}

}  // namespace strata::kernels::cpu::internal
