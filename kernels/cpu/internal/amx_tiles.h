// Building blocks shared by the AMX kernels (matmul_amx.cc, mla_prefill_amx.cc). Internal to
// kernels/cpu; call the AMX functions only where AmxBf16Usable() (matmul_tiles.h) holds.
//
// Tiles are configured 16 rows × 64 bytes (core/amx.h): an A operand is 16 rows × 32 bf16 in row
// layout, a B operand 16 k pairs × 16 columns of (bf16, bf16) words ("pair-interleaved"), an
// accumulator 16 × 16 f32. Packed operands here are whole tiles, 1 KB contiguous each.
#pragma once

#include <cstdint>

#include "core/avx512_intrinsics.h"

#define STRATA_TARGET_AMX \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

namespace strata::kernels::cpu::internal {

inline constexpr int kAmxTile = 16;   // tile rows; f32 columns of an accumulator
inline constexpr int kAmxStepK = 32;  // bf16 per A-tile row: the k of one tile product
inline constexpr int kAmxTileBytes = 1024;

// r[i] (16 lanes) ← column i of the 16 × 16 matrix whose rows are r[0..15] (32-bit elements).
STRATA_TARGET_AMX inline void Transpose16x16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  // r[4i + q]: rows 4i .. 4i + 3, element q of every 128-bit lane; now gather the lanes.
  for (int i = 0; i < 2; ++i) {
    for (int q = 0; q < 4; ++q) {
      t[8 * i + q] = _mm512_shuffle_f32x4(r[8 * i + q], r[8 * i + 4 + q], 0x88);
      t[8 * i + 4 + q] = _mm512_shuffle_f32x4(r[8 * i + q], r[8 * i + 4 + q], 0xdd);
    }
  }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm512_shuffle_f32x4(t[q], t[8 + q], 0x88);
    r[q + 8] = _mm512_shuffle_f32x4(t[q], t[8 + q], 0xdd);
    r[q + 4] = _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0x88);
    r[q + 12] = _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0xdd);
  }
}

// uint32 words of PackXForAmxInto's output for m rows of k.
int64_t PackedXForAmxWords(int64_t k, int64_t m);
// x rows (row i = x + rows[i]·k, or row i) rounded to bf16 into xp as B operands: blocks of 16
// rows (columns of the product), zero rows past m up to a multiple of 32; block b holds
// roundup(k, 32) / 2 pairs × 16 words, so its tile for k step s is 1 KB at word (b·kp/2 + s·16)·16.
// Needs AVX512-BF16 (no AMX). Runs on this thread's pool (ParallelFor) when the rows are many;
// serially inside a task.
void PackXForAmxInto(const float* x, int64_t k, const int64_t* rows, int64_t m, uint32_t* xp);
// The same from rows of bf16 bits (copied, not rounded).
void PackXForAmxInto(const uint16_t* x, int64_t k, const int64_t* rows, int64_t m, uint32_t* xp);

}  // namespace strata::kernels::cpu::internal
