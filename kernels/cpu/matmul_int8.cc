// Int8-weight tiles (core/int8_quantize.h): codes widened and scaled in registers, activations
// f32 in natural order.
//
// One 32-element group of a row = 32 code bytes + one bf16 scale s. A weight is code · s, exact
// in f32 (7 bits times 8 bits), so the decoded weights equal the reference's:
//   per 16 (AVX-512) or 8 (AVX2) codes: sign-extend to i32 lanes, convert, multiply by s.
// The same decode writes an f32 scratch tile (DecodeInt8Tile*) for the many-row path, and the
// f32 tiles step through it 16 (8) elements at a time into one accumulator per output as these
// tiles do, so both paths give the same bits.
#include "core/avx512_intrinsics.h"

#include "core/int8_quantize.h"
#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/internal/prefetch.h"
#include "kernels/cpu/internal/simd_avx2.h"
#include "kernels/cpu/internal/simd_avx512.h"
#include "kernels/cpu/internal/tile_table.h"

namespace strata::kernels::cpu::internal {
namespace {

constexpr int kGroup = kInt8GroupSize;  // 32 codes, one scale

inline float Scale(const uint8_t* scales, int64_t group) {
  return Bf16ToF32(reinterpret_cast<const uint16_t*>(scales)[group]);
}

// 16 weights from 16 codes at `codes`.
STRATA_TARGET_AVX512 __attribute__((always_inline)) inline __m512 Decode16(const int8_t* codes,
                                                                           __m512 scale) {
  const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(q), scale);
}

// 8 weights from 8 codes at `codes`.
inline __m256 Decode8(const int8_t* codes, __m256 scale) {
  const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(q), scale);
}

template <int MR, int NR>
struct Int8Tile512 {
  STRATA_TARGET_AVX512 static void Run(const TileArgs& t) {
    const float* x = static_cast<const float*>(t.x);
    const int8_t* w[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) w[j] = static_cast<const int8_t*>(t.w[j]);
    __m512 acc[MR][NR];
#pragma GCC unroll 16
    for (int e = 0; e < MR * NR; ++e) acc[e / NR][e % NR] = _mm512_setzero_ps();
    for (int64_t p = 0; p < t.kc; p += kGroup) {
      if (p % 64 == 0) PrefetchNextSlice<NR>(t.w_next, p);  // a 64-byte line holds 2 groups
      __m512 x0[MR], x1[MR];
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        x0[i] = _mm512_loadu_ps(x + i * t.ldx + p);
        x1[i] = _mm512_loadu_ps(x + i * t.ldx + p + 16);
      }
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        const __m512 s = _mm512_set1_ps(Scale(t.scales[j], p / kGroup));
        const __m512 w0 = Decode16(w[j] + p, s);
        const __m512 w1 = Decode16(w[j] + p + 16, s);
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) {
          acc[i][j] = _mm512_fmadd_ps(x0[i], w0, acc[i][j]);
          acc[i][j] = _mm512_fmadd_ps(x1[i], w1, acc[i][j]);
        }
      }
    }
    StoreTile512(acc, t);
  }
};

template <int MR, int NR>
struct Int8Tile256 {
  static void Run(const TileArgs& t) {
    const float* x = static_cast<const float*>(t.x);
    const int8_t* w[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) w[j] = static_cast<const int8_t*>(t.w[j]);
    __m256 acc[MR][NR];
#pragma GCC unroll 8
    for (int e = 0; e < MR * NR; ++e) acc[e / NR][e % NR] = _mm256_setzero_ps();
    for (int64_t p = 0; p < t.kc; p += kGroup) {
      if (p % 64 == 0) PrefetchNextSlice<NR>(t.w_next, p);
      __m256 s[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) s[j] = _mm256_set1_ps(Scale(t.scales[j], p / kGroup));
#pragma GCC unroll 4
      for (int v = 0; v < kGroup; v += 8) {
        __m256 xv[MR];
#pragma GCC unroll 2
        for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x + i * t.ldx + p + v);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) {
          const __m256 wv = Decode8(w[j] + p + v, s[j]);
#pragma GCC unroll 2
          for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
        }
      }
    }
    StoreTile256(acc, t);
  }
};

}  // namespace

const TileKernels& Int8TilesAvx512() {
  static const TileKernels k = MakeTileTable<Int8Tile512, 4, 4>(XLayout::kNatural, kGroup, nullptr);
  return k;
}

const TileKernels& Int8TilesAvx2() {
  static const TileKernels k = MakeTileTable<Int8Tile256, 2, 4>(XLayout::kNatural, kGroup, nullptr);
  return k;
}

STRATA_TARGET_AVX512 void DecodeInt8TileAvx512(const uint8_t* const* packed,
                                               const uint8_t* const* scales, int nr, int64_t kc,
                                               float* dst) {
  for (int r = 0; r < nr; ++r) {
    const auto* codes = reinterpret_cast<const int8_t*>(packed[r]);
    for (int64_t p = 0; p < kc; p += kGroup) {
      const __m512 s = _mm512_set1_ps(Scale(scales[r], p / kGroup));
      _mm512_storeu_ps(dst + r * kc + p, Decode16(codes + p, s));
      _mm512_storeu_ps(dst + r * kc + p + 16, Decode16(codes + p + 16, s));
    }
  }
}

void DecodeInt8TileAvx2(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                        int64_t kc, float* dst) {
  for (int r = 0; r < nr; ++r) {
    const auto* codes = reinterpret_cast<const int8_t*>(packed[r]);
    for (int64_t p = 0; p < kc; p += kGroup) {
      const __m256 s = _mm256_set1_ps(Scale(scales[r], p / kGroup));
      for (int v = 0; v < kGroup; v += 8) {
        _mm256_storeu_ps(dst + r * kc + p + v, Decode8(codes + p + v, s));
      }
    }
  }
}

// Only where the bf16 products run: CPUs with AVX512_BF16 (and AMX).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) void DecodeInt8RowBf16(
    const int8_t* codes, const uint16_t* scales, int64_t groups, int64_t group_stride,
    uint16_t* dst) {
  for (int64_t g = 0; g < groups; ++g) {
    const __m512 s = _mm512_set1_ps(Bf16ToF32(scales[g]));
    const int8_t* group = codes + g * kGroup;
    // code · s (exact, finite) rounded to nearest even, 32 at once (the bf16 products treat a
    // subnormal bf16 as zero; vcvtne2ps2bf16 flushes it here already).
    const __m512bh words = _mm512_cvtne2ps_pbh(Decode16(group + 16, s), Decode16(group, s));
    _mm512_storeu_si512(dst + g * group_stride, reinterpret_cast<const __m512i&>(words));
  }
}

void DecodeInt8TileBf16Avx512(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                              int64_t kc, float* dst) {
  for (int r = 0; r < nr; ++r) {
    DecodeInt8RowBf16(reinterpret_cast<const int8_t*>(packed[r]),
                      reinterpret_cast<const uint16_t*>(scales[r]), kc / kGroup, kGroup,
                      reinterpret_cast<uint16_t*>(dst + r * kc));
  }
}

}  // namespace strata::kernels::cpu::internal
