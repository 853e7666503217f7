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

namespace strata::kernels::cpu::internal {

// Prefetches byte `offset` of rows 0..NR-1 of the next slice (row stride ldw_bytes); no-op when
// there is none.
template <int NR>
inline void PrefetchNextSlice(const void* w_next, int64_t ldw_bytes, int64_t offset) {
  if (w_next == nullptr) return;
  const char* base = static_cast<const char*>(w_next) + offset;
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) _mm_prefetch(base + j * ldw_bytes, _MM_HINT_T1);
}

}  // namespace strata::kernels::cpu::internal
