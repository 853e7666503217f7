// MXFP4-weight tiles: E2M1 codes decoded in registers, activations f32 in kEvenOdd order.
//
// One 32-element block of a row = 16 code bytes + 1 E8M0 scale byte. Byte b holds element 2b
// (low nibble) and 2b+1 (high nibble). Decoding is a table lookup on the scaled E2M1 table
// (kE2M1Values[c] · 2^(s−127) is exact in f32, so the decoded weights equal the reference's):
//   AVX-512: the 16 bytes widen to 16 u32 lanes; vpermps uses the low 4 bits of each index, so
//            even = permutexvar(bytes, table·s), odd = permutexvar(bytes >> 4, table·s).
//   AVX2:    vpermps indexes only 8 entries: look up the magnitude (code & 7) in the positive
//            half of the table and xor in the sign (code bit 3 → bit 31); 8 bytes per half.
// The same decode writes an f32 scratch tile (Decode*Tile*) for the many-row path, so both
// paths multiply by bit-identical weights in the same order.
#include "core/avx512_intrinsics.h"

#include "core/dtype.h"
#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/internal/prefetch.h"
#include "kernels/cpu/internal/simd_avx2.h"
#include "kernels/cpu/internal/simd_avx512.h"
#include "kernels/cpu/internal/tile_table.h"

namespace strata::kernels::cpu::internal {
namespace {

constexpr int kBlock = kMxfp4BlockSize;  // 32 elements, 16 bytes, 1 scale

struct Decoded512 {
  __m512 even, odd;
};

STRATA_TARGET_AVX512 __attribute__((always_inline)) inline Decoded512 DecodeBlock512(
    const uint8_t* bytes, float scale) {
  const __m512 table = _mm512_mul_ps(_mm512_loadu_ps(kE2M1Values), _mm512_set1_ps(scale));
  const __m512i codes =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
  return {_mm512_permutexvar_ps(codes, table),
          _mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), table)};
}

struct Decoded256 {
  __m256 even, odd;
};

// Half h of a block: bytes [8h, 8h+8) → elements [16h, 16h+16).
inline Decoded256 DecodeHalf256(const uint8_t* bytes, __m256 positive_table) {
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i codes =
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes)));
  const __m256 even_sign =
      _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(codes, 28), sign));
  const __m256 odd_sign = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(codes, 24), sign));
  return {_mm256_xor_ps(_mm256_permutevar8x32_ps(positive_table, codes), even_sign),
          _mm256_xor_ps(_mm256_permutevar8x32_ps(positive_table, _mm256_srli_epi32(codes, 4)),
                        odd_sign)};
}

inline __m256 PositiveTable256(float scale) {
  return _mm256_mul_ps(_mm256_loadu_ps(kE2M1Values), _mm256_set1_ps(scale));
}

template <int MR, int NR>
struct Mxfp4Tile512 {
  STRATA_TARGET_AVX512 static void Run(const TileArgs& t) {
    const float* x = static_cast<const float*>(t.x);
    const uint8_t* w[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) w[j] = static_cast<const uint8_t*>(t.w[j]);
    const float* e8m0 = E8M0Table();
    __m512 acc[MR][NR];
#pragma GCC unroll 16
    for (int e = 0; e < MR * NR; ++e) acc[e / NR][e % NR] = _mm512_setzero_ps();
    for (int64_t p = 0; p < t.kc; p += kBlock) {
      // A 64-byte line holds 4 blocks of a row.
      if (p % 128 == 0) PrefetchNextSlice<NR>(t.w_next, p / 2);
      __m512 xe[MR], xo[MR];
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        xe[i] = _mm512_loadu_ps(x + i * t.ldx + p);
        xo[i] = _mm512_loadu_ps(x + i * t.ldx + p + 16);
      }
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        const Decoded512 d = DecodeBlock512(w[j] + p / 2, e8m0[t.scales[j][p / kBlock]]);
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) {
          acc[i][j] = _mm512_fmadd_ps(xe[i], d.even, acc[i][j]);
          acc[i][j] = _mm512_fmadd_ps(xo[i], d.odd, acc[i][j]);
        }
      }
    }
    StoreTile512(acc, t);
  }
};

template <int MR, int NR>
struct Mxfp4Tile256 {
  static void Run(const TileArgs& t) {
    const float* x = static_cast<const float*>(t.x);
    const uint8_t* w[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) w[j] = static_cast<const uint8_t*>(t.w[j]);
    const float* e8m0 = E8M0Table();
    __m256 acc[MR][NR];
#pragma GCC unroll 8
    for (int e = 0; e < MR * NR; ++e) acc[e / NR][e % NR] = _mm256_setzero_ps();
    for (int64_t p = 0; p < t.kc; p += kBlock) {
      // A 64-byte line holds 4 blocks of a row.
      if (p % 128 == 0) PrefetchNextSlice<NR>(t.w_next, p / 2);
      __m256 table[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        table[j] = PositiveTable256(e8m0[t.scales[j][p / kBlock]]);
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256 xe[MR], xo[MR];
#pragma GCC unroll 2
        for (int i = 0; i < MR; ++i) {
          xe[i] = _mm256_loadu_ps(x + i * t.ldx + p + 16 * h);
          xo[i] = _mm256_loadu_ps(x + i * t.ldx + p + 16 * h + 8);
        }
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) {
          const Decoded256 d = DecodeHalf256(w[j] + p / 2 + 8 * h, table[j]);
#pragma GCC unroll 2
          for (int i = 0; i < MR; ++i) {
            acc[i][j] = _mm256_fmadd_ps(xe[i], d.even, acc[i][j]);
            acc[i][j] = _mm256_fmadd_ps(xo[i], d.odd, acc[i][j]);
          }
        }
      }
    }
    StoreTile256(acc, t);
  }
};

}  // namespace

const float* E8M0Table() {
  static const auto* table = [] {
    auto* values = new float[256];
    for (int e = 0; e < 256; ++e) values[e] = E8M0ToF32(static_cast<uint8_t>(e));
    return values;
  }();
  return table;
}

const TileKernels& Mxfp4TilesAvx512() {
  static const TileKernels k =
      MakeTileTable<Mxfp4Tile512, 4, 4>(XLayout::kEvenOdd, 32, &PackEvenOddRowAvx512);
  return k;
}

const TileKernels& Mxfp4TilesAvx2() {
  static const TileKernels k =
      MakeTileTable<Mxfp4Tile256, 2, 4>(XLayout::kEvenOdd, 16, &PackEvenOddRowAvx2);
  return k;
}

STRATA_TARGET_AVX512 void DecodeMxfp4TileAvx512(const uint8_t* const* packed,
                                                const uint8_t* const* scales, int nr, int64_t kc,
                                                float* dst) {
  const float* e8m0 = E8M0Table();
  for (int r = 0; r < nr; ++r) {
    for (int64_t p = 0; p < kc; p += kBlock) {
      const Decoded512 d = DecodeBlock512(packed[r] + p / 2, e8m0[scales[r][p / kBlock]]);
      _mm512_storeu_ps(dst + r * kc + p, d.even);
      _mm512_storeu_ps(dst + r * kc + p + 16, d.odd);
    }
  }
}

STRATA_TARGET_AVX512 void DecodeMxfp4RowBf16(const uint8_t* packed, const uint8_t* scales,
                                             int64_t blocks, int64_t block_stride, uint16_t* dst) {
  const float* e8m0 = E8M0Table();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t b = 0; b < blocks; ++b) {
    const Decoded512 d = DecodeBlock512(packed + b * kBlock / 2, e8m0[scales[b]]);
    // Word l = (element 2l, element 2l + 1): the upper halves of the exact f32 values.
    const __m512i words = _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(d.even), 16),
                                          _mm512_and_si512(_mm512_castps_si512(d.odd), high));
    _mm512_storeu_si512(dst + b * block_stride, words);
  }
}

void DecodeMxfp4TileBf16Avx512(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                               int64_t kc, float* dst) {
  for (int r = 0; r < nr; ++r) {
    DecodeMxfp4RowBf16(packed[r], scales[r], kc / kBlock, kBlock,
                       reinterpret_cast<uint16_t*>(dst + r * kc));
  }
}

void DecodeMxfp4TileAvx2(const uint8_t* const* packed, const uint8_t* const* scales, int nr,
                         int64_t kc, float* dst) {
  const float* e8m0 = E8M0Table();
  for (int r = 0; r < nr; ++r) {
    for (int64_t p = 0; p < kc; p += kBlock) {
      const __m256 table = PositiveTable256(e8m0[scales[r][p / kBlock]]);
      for (int h = 0; h < 2; ++h) {
        const Decoded256 d = DecodeHalf256(packed[r] + p / 2 + 8 * h, table);
        _mm256_storeu_ps(dst + r * kc + p + 16 * h, d.even);
        _mm256_storeu_ps(dst + r * kc + p + 16 * h + 8, d.odd);
      }
    }
  }
}

}  // namespace strata::kernels::cpu::internal
