// bf16-weight tiles: weights widened to f32 in registers, activations f32 in kEvenOdd order.
//
// A 64-byte load holds 32 bf16 weights; as 16 u32 lanes, lane l = (w[2l+1] << 16) | w[2l], so
//   even = lane << 16          = f32(w[2l])      (exact)
//   odd  = lane & 0xFFFF0000   = f32(w[2l+1])    (exact)
// two integer ops per 32 weights, no cross-lane shuffle; x_perm supplies x in the same order.
// Per 32-element step and output: acc = fma(x_even, even, acc); acc = fma(x_odd, odd, acc).
#include "core/avx512_intrinsics.h"

#include <cstring>

#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/internal/prefetch.h"
#include "kernels/cpu/internal/simd_avx2.h"
#include "kernels/cpu/internal/simd_avx512.h"
#include "kernels/cpu/internal/tile_table.h"

namespace strata::kernels::cpu::internal {
namespace {

template <int MR, int NR>
struct Bf16Tile512 {
  STRATA_TARGET_AVX512 __attribute__((always_inline)) static inline void Step(
      __m512 (&acc)[MR][NR], const float* x, int64_t ldx, const uint16_t* const (&w)[NR], int64_t p,
      __mmask32 mask) {
    const __m512i odd_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    __m512 xe[MR], xo[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      xe[i] = _mm512_loadu_ps(x + i * ldx + p);
      xo[i] = _mm512_loadu_ps(x + i * ldx + p + 16);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m512i raw = _mm512_maskz_loadu_epi16(mask, w[j] + p);
      const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
      const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(raw, odd_mask));
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = _mm512_fmadd_ps(xe[i], even, acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(xo[i], odd, acc[i][j]);
      }
    }
  }

  STRATA_TARGET_AVX512 static void Run(const TileArgs& t) {
    const float* x = static_cast<const float*>(t.x);
    const uint16_t* w[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) w[j] = static_cast<const uint16_t*>(t.w[j]);
    __m512 acc[MR][NR];
#pragma GCC unroll 16
    for (int e = 0; e < MR * NR; ++e) acc[e / NR][e % NR] = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 32 <= t.kc; p += 32) {  // one 64-byte line per row per step
      PrefetchNextSlice<NR>(t.w_next, 2 * p);
      Step(acc, x, t.ldx, w, p, ~__mmask32{0});
    }
    if (p < t.kc) {  // x_perm is zero-padded; the masked load zeroes the missing weights
      Step(acc, x, t.ldx, w, p, _cvtu32_mask32((1u << (t.kc - p)) - 1));
    }
    StoreTile512(acc, t);
  }
};

// 16 bf16 weights (one 32-byte load as 8 u32 lanes) as f32: even = w[2l], odd = w[2l + 1].
struct Widened256 {
  __m256 even, odd;
};
inline Widened256 Widen256(__m256i raw) {
  const __m256i odd_mask = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(raw, 16)),
          _mm256_castsi256_ps(_mm256_and_si256(raw, odd_mask))};
}

template <int MR, int NR>
struct Bf16Tile256 {
  __attribute__((always_inline)) static inline void Step(__m256 (&acc)[MR][NR], const float* x,
                                                         int64_t ldx,
                                                         const uint16_t* const (&wj)[NR]) {
    __m256 xe[MR], xo[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      xe[i] = _mm256_loadu_ps(x + i * ldx);
      xo[i] = _mm256_loadu_ps(x + i * ldx + 8);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const Widened256 w = Widen256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wj[j])));
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = _mm256_fmadd_ps(xe[i], w.even, acc[i][j]);
        acc[i][j] = _mm256_fmadd_ps(xo[i], w.odd, acc[i][j]);
      }
    }
  }

  static void Run(const TileArgs& t) {
    const float* x = static_cast<const float*>(t.x);
    const uint16_t* w[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) w[j] = static_cast<const uint16_t*>(t.w[j]);
    __m256 acc[MR][NR];
#pragma GCC unroll 8
    for (int e = 0; e < MR * NR; ++e) acc[e / NR][e % NR] = _mm256_setzero_ps();
    int64_t p = 0;
    for (; p + 16 <= t.kc; p += 16) {
      const uint16_t* wj[NR];
      for (int j = 0; j < NR; ++j) wj[j] = w[j] + p;
      if (p % 32 == 0) PrefetchNextSlice<NR>(t.w_next, 2 * p);
      Step(acc, x + p, t.ldx, wj);
    }
    if (p < t.kc) {  // copy the row tails into zero-padded buffers (AVX2 has no 16-bit masks)
      alignas(32) uint16_t tail[NR][16] = {};
      const uint16_t* wj[NR];
      for (int j = 0; j < NR; ++j) {
        std::memcpy(tail[j], w[j] + p, static_cast<size_t>(t.kc - p) * sizeof(uint16_t));
        wj[j] = tail[j];
      }
      Step(acc, x + p, t.ldx, wj);
    }
    StoreTile256(acc, t);
  }
};

}  // namespace

void DecodeBf16TileAvx2(const uint8_t* const* packed, const uint8_t* const* /*scales*/, int nr,
                        int64_t kc, float* dst) {
  const int64_t stride = (kc + 15) / 16 * 16;
  for (int r = 0; r < nr; ++r) {
    const uint16_t* w = reinterpret_cast<const uint16_t*>(packed[r]);
    float* out = dst + r * stride;
    for (int64_t p = 0; p < stride; p += 16) {
      __m256i raw;
      if (p + 16 <= kc) {
        raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + p));
      } else {  // the row's tail, zero-padded to the 16-element block
        alignas(32) uint16_t tail[16] = {};
        std::memcpy(tail, w + p, static_cast<size_t>(kc - p) * sizeof(uint16_t));
        raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
      }
      const Widened256 w = Widen256(raw);
      _mm256_storeu_ps(out + p, w.even);
      _mm256_storeu_ps(out + p + 8, w.odd);
    }
  }
}

const TileKernels& Bf16TilesAvx512() {
  static const TileKernels k =
      MakeTileTable<Bf16Tile512, 4, 4>(XLayout::kEvenOdd, 32, &PackEvenOddRowAvx512);
  return k;
}

const TileKernels& Bf16TilesAvx2() {
  static const TileKernels k =
      MakeTileTable<Bf16Tile256, 2, 4>(XLayout::kEvenOdd, 16, &PackEvenOddRowAvx2);
  return k;
}

}  // namespace strata::kernels::cpu::internal
