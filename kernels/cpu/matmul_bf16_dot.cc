// The lossy bf16 variant, kept to measure what accuracy buys: x rounded to bf16 (kBf16 layout)
// and vdpbf16ps on raw weight pairs (lane l += x[2l]·w[2l] + x[2l+1]·w[2l+1]). No widening, but
// x keeps only 8 significant bits (relative error up to 2^-9 per product), so kAuto never picks
// it; see README.md for the numbers.
#include "core/avx512_intrinsics.h"

#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/internal/prefetch.h"
#include "kernels/cpu/internal/simd_avx512.h"
#include "kernels/cpu/internal/tile_table.h"

#define STRATA_TARGET_AVX512BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace strata::kernels::cpu::internal {
namespace {

template <int MR, int NR>
struct Bf16DotTile {
  STRATA_TARGET_AVX512BF16 __attribute__((always_inline)) static inline void Step(
      __m512 (&acc)[MR][NR], const uint16_t* x, int64_t ldx, const uint16_t* const (&w)[NR],
      int64_t p, __mmask32 mask) {
    __m512bh xb[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) xb[i] = (__m512bh)_mm512_loadu_si512(x + i * ldx + p);
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m512bh raw = (__m512bh)_mm512_maskz_loadu_epi16(mask, w[j] + p);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xb[i], raw);
    }
  }

  STRATA_TARGET_AVX512BF16 static void Run(const TileArgs& t) {
    const uint16_t* x = static_cast<const uint16_t*>(t.x);
    const uint16_t* w[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) w[j] = static_cast<const uint16_t*>(t.w[j]);
    __m512 acc[MR][NR];
#pragma GCC unroll 16
    for (int e = 0; e < MR * NR; ++e) acc[e / NR][e % NR] = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 32 <= t.kc; p += 32) {
      PrefetchNextSlice<NR>(t.w_next, 2 * p);
      Step(acc, x, t.ldx, w, p, ~__mmask32{0});
    }
    if (p < t.kc) Step(acc, x, t.ldx, w, p, _cvtu32_mask32((1u << (t.kc - p)) - 1));
    StoreTile512(acc, t);
  }
};

}  // namespace

const TileKernels& Bf16DotLossyTilesAvx512Bf16() {
  static const TileKernels k = MakeTileTable<Bf16DotTile, 4, 4>(XLayout::kBf16, 32, &PackBf16Row);
  return k;
}

}  // namespace strata::kernels::cpu::internal
