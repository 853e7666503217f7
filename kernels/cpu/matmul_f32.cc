// f32-weight tiles (also run on MXFP4 weights, and on AVX2 on bf16 ones, decoded to an f32
// scratch tile, with x in the matching kEvenOdd order). Per V-element step and output:
// acc = fma(x, w, acc). AVX2: 3 × 4 tiles, 12 accumulators — enough independent FMA chains to
// cover the FMA latency (2 × 4 was latency-bound: 55 % of the FMA ceiling, 3 × 4 76 %).
#include "core/avx512_intrinsics.h"

#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/internal/prefetch.h"
#include "kernels/cpu/internal/simd_avx2.h"
#include "kernels/cpu/internal/simd_avx512.h"
#include "kernels/cpu/internal/tile_table.h"

namespace strata::kernels::cpu::internal {
namespace {

template <int MR, int NR>
struct F32Tile512 {
  STRATA_TARGET_AVX512 __attribute__((always_inline)) static inline void Step(
      __m512 (&acc)[MR][NR], const float* x, int64_t ldx, const float* const (&w)[NR], int64_t p,
      __mmask16 mask) {
    __m512 xv[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) xv[i] = _mm512_maskz_loadu_ps(mask, x + i * ldx + p);
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m512 wv = _mm512_maskz_loadu_ps(mask, w[j] + p);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }

  STRATA_TARGET_AVX512 static void Run(const TileArgs& t) {
    const float* x = static_cast<const float*>(t.x);
    const float* w[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) w[j] = static_cast<const float*>(t.w[j]);
    __m512 acc[MR][NR];
#pragma GCC unroll 16
    for (int e = 0; e < MR * NR; ++e) acc[e / NR][e % NR] = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 16 <= t.kc; p += 16) {  // one 64-byte line per row per step
      PrefetchNextSlice<NR>(t.w_next, 4 * p);
      Step(acc, x, t.ldx, w, p, __mmask16{0xFFFF});
    }
    if (p < t.kc) {
      Step(acc, x, t.ldx, w, p, _cvtu32_mask16((1u << (t.kc - p)) - 1));
    }
    StoreTile512(acc, t);
  }
};

template <int MR, int NR>
struct F32Tile256 {
  template <bool kMasked>
  __attribute__((always_inline)) static inline void Step(__m256 (&acc)[MR][NR], const float* x,
                                                         int64_t ldx, const float* const (&w)[NR],
                                                         int64_t p, __m256i mask) {
    __m256 xv[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      xv[i] =
          kMasked ? _mm256_maskload_ps(x + i * ldx + p, mask) : _mm256_loadu_ps(x + i * ldx + p);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const float* wj = w[j] + p;
      const __m256 wv = kMasked ? _mm256_maskload_ps(wj, mask) : _mm256_loadu_ps(wj);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }

  static void Run(const TileArgs& t) {
    const float* x = static_cast<const float*>(t.x);
    const float* w[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) w[j] = static_cast<const float*>(t.w[j]);
    __m256 acc[MR][NR];
#pragma GCC unroll 8
    for (int e = 0; e < MR * NR; ++e) acc[e / NR][e % NR] = _mm256_setzero_ps();
    int64_t p = 0;
    for (; p + 8 <= t.kc; p += 8) {
      if (p % 16 == 0) PrefetchNextSlice<NR>(t.w_next, 4 * p);
      Step<false>(acc, x, t.ldx, w, p, __m256i{});
    }
    if (p < t.kc) Step<true>(acc, x, t.ldx, w, p, FirstLanesMask256(t.kc - p));
    StoreTile256(acc, t);
  }
};

}  // namespace

const TileKernels& F32TilesAvx512() {
  static const TileKernels k = MakeTileTable<F32Tile512, 4, 4>(XLayout::kNatural, 16, nullptr);
  return k;
}

const TileKernels& F32TilesAvx2() {
  static const TileKernels k = MakeTileTable<F32Tile256, 3, 4>(XLayout::kNatural, 8, nullptr);
  return k;
}

}  // namespace strata::kernels::cpu::internal
