// The int8-activation tiles (MatmulPrecision::kInt8; AVX512_VNNI): x rounded to int8 per
// 32-element block (kernels/reference/matmul_q8.h: llama.cpp's Q8_0 activations with an f32
// scale), weights decoded to bytes, 4-element dot products summed in int32 by vpdpbusd, one f32
// FMA per 16 lanes scaling them. vpdpbusd multiplies unsigned by signed bytes, so the weight
// bytes are offset to unsigned and every x row carries the offset's correction
// (bias = −offset · Σ its codes, per int32 lane), which starts each lane's sum:
//
//   MXFP4 (kQ8Mxfp4, 128-element superblocks, 256 bytes of packed x each):
//     [even codes: byte b = q[2b] | odd codes: q[2b+1] | bias[16] int32 | sx lanes[16] f32]
//     weight bytes: 64 code bytes → low / high nibbles → vpshufb over 2·E2M1 + 16 (4..28)
//     lane l sums elements 8l..8l+7 (block l/4): d = bias + Σ (2w+16)·q = Σ 2w·q, and the lane's
//     scale is 2^(e_b − 127) · sx_b / 2 (E8M0 byte e_b shifted into an f32 exponent)
//   int8 (kQ8Int8, 64-element superblocks, 192 bytes):
//     [codes q[b] | bias[16] int32 | sx lanes[16] f32]
//     weight bytes: code ^ 0x80 = code + 128; lane l sums elements 4l..4l+3 (group l/8), scale
//     s_g · sx_g (bf16 scale widened in registers)
//
// Per 128 MXFP4 weights and x row: 2 vpdpbusd + convert + multiply + FMA, against 8 FMAs and a
// per-row decode of ~9 instructions per 32 weights in the exact tiles (matmul_mxfp4.cc).
// An E8M0 byte 0 scales by 0 here (2^−127 in the exact products) and 255 by infinity (NaN).
// Each output accumulates its lanes in a fixed order per k block (reduced by StoreTile512), and
// a row's codes depend on that row alone: results do not depend on m or the thread count.
#include "core/avx512_intrinsics.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/int8_quantize.h"
#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/internal/prefetch.h"
#include "kernels/cpu/internal/simd_avx512.h"
#include "kernels/cpu/internal/tile_table.h"

#define STRATA_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace strata::kernels::cpu::internal {
namespace {

constexpr int kQ8Block = 32;
constexpr int kMxfp4Super = 128;  // elements per kQ8Mxfp4 superblock (one 64-byte code line)
constexpr int kInt8Super = 64;    // elements per kQ8Int8 superblock

// 32 values → their codes (int32 lanes, two vectors) and the block's scale sx (NaN for a block
// with an infinity or a NaN, 0 for one of zeros or of values below ~3.7e-37; the codes are then
// 0). As QuantizeQ8Reference, bit for bit.
STRATA_TARGET_VNNI __attribute__((always_inline)) inline float QuantizeBlock(const float* v,
                                                                             __m512i* q0,
                                                                             __m512i* q1) {
  const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(v));
  const __m512 b = _mm512_abs_ps(_mm512_loadu_ps(v + 16));
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const bool bad = (_mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ) |
                    _mm512_cmp_ps_mask(b, inf, _CMP_NLT_UQ)) != 0;  // ≥ inf, or NaN
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a, b));
  const float inverse_value = 127.0f / amax;
  if (bad || !(inverse_value <= std::numeric_limits<float>::max())) {  // zeros, or tiny
    *q0 = *q1 = _mm512_setzero_si512();
    return bad ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
  }
  const __m512 inverse = _mm512_set1_ps(inverse_value);
  *q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(v), inverse));  // nearest even
  *q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(v + 16), inverse));
  return amax / 127.0f;
}

// Quantises the superblock of `super` elements at src + p (k − p of them present; the rest read
// as zeros) into natural-order codes and per-block scales.
STRATA_TARGET_VNNI inline void QuantizeSuper(const float* src, int64_t k, int64_t p, int super,
                                             int8_t* codes, float* scales) {
  alignas(64) float padded[kMxfp4Super];
  const float* v = src + p;
  if (p + super > k) {
    std::fill(padded, padded + super, 0.0f);
    std::memcpy(padded, v, static_cast<size_t>(k - p) * sizeof(float));
    v = padded;
  }
  for (int b = 0; b < super / kQ8Block; ++b) {
    __m512i q0, q1;
    scales[b] = QuantizeBlock(v + b * kQ8Block, &q0, &q1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + b * kQ8Block), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + b * kQ8Block + 16),
                     _mm512_cvtepi32_epi8(q1));
  }
}

// −offset · (Σ of the codes of each int32 lane of `codes`), lane by lane, added to `sum`.
STRATA_TARGET_VNNI inline __m512i LaneSums(__m512i sum, __m512i codes) {
  return _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), codes);
}

STRATA_TARGET_VNNI void PackQ8Mxfp4Row(const float* src, int64_t k, void* out) {
  auto* dst = static_cast<uint8_t*>(out);
  // Within each 16-byte lane: even bytes to 0..7, odd bytes to 8..15.
  const __m512i split =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m512i evens = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
  const __m512i odds = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const int64_t padded_k = (k + kMxfp4Super - 1) / kMxfp4Super * kMxfp4Super;
  for (int64_t p = 0; p < padded_k; p += kMxfp4Super) {
    alignas(64) int8_t codes[kMxfp4Super];
    alignas(16) float scales[kMxfp4Super / kQ8Block];
    QuantizeSuper(src, k, p, kMxfp4Super, codes, scales);
    const __m512i s0 = _mm512_shuffle_epi8(_mm512_load_si512(codes), split);
    const __m512i s1 = _mm512_shuffle_epi8(_mm512_load_si512(codes + 64), split);
    const __m512i even = _mm512_permutex2var_epi64(s0, evens, s1);
    const __m512i odd = _mm512_permutex2var_epi64(s0, odds, s1);
    uint8_t* super = dst + 2 * p;
    _mm512_storeu_si512(super, even);
    _mm512_storeu_si512(super + 64, odd);
    // The E2M1 bytes are 2w + 16: the bias takes back 16 · Σ q over a lane's 8 elements.
    const __m512i sums = LaneSums(LaneSums(_mm512_setzero_si512(), even), odd);
    _mm512_storeu_si512(super + 128,
                        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, 4)));
    // Lane l scales block l/4; the E2M1 bytes hold 2w, so half of sx.
    const __m512 half =
        _mm512_mul_ps(_mm512_castps128_ps512(_mm_load_ps(scales)), _mm512_set1_ps(0.5f));
    _mm512_storeu_ps(super + 192, _mm512_permutexvar_ps(spread, half));
  }
}

STRATA_TARGET_VNNI void PackQ8Int8Row(const float* src, int64_t k, void* out) {
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t padded_k = (k + kInt8Super - 1) / kInt8Super * kInt8Super;
  for (int64_t p = 0; p < padded_k; p += kInt8Super) {
    alignas(64) int8_t codes[kInt8Super];
    float scales[kInt8Super / kQ8Block];
    QuantizeSuper(src, k, p, kInt8Super, codes, scales);
    const __m512i q = _mm512_load_si512(codes);
    uint8_t* super = dst + 3 * p;
    _mm512_storeu_si512(super, q);
    // The weight bytes are code + 128: the bias takes back 128 · Σ q over a lane's 4 elements.
    const __m512i sums = LaneSums(_mm512_setzero_si512(), q);
    _mm512_storeu_si512(super + 64,
                        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, 7)));
    _mm512_storeu_ps(super + 128,
                     _mm512_insertf32x8(_mm512_set1_ps(scales[0]), _mm256_set1_ps(scales[1]), 1));
  }
}

// Σ over the lanes' codes, scaled: acc += f32(d) · (sw · sx), d = bias + Σ w·q (vpdpbusd).
STRATA_TARGET_VNNI __attribute__((always_inline)) inline __m512 Accumulate(__m512 acc, __m512i d,
                                                                           __m512 sw,
                                                                           const uint8_t* sx) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sw, _mm512_loadu_ps(sx)), acc);
}

template <int MR, int NR>
using Accumulators = __m512[MR][NR];

// A weight format's side of the tiles: its superblock, its bytes per 32-element block, and Step,
// which adds one superblock (p: its first element) of every row to the accumulators;
// `code_mask` / `scale_mask` select the bytes present (a row's last superblock may be partial).
struct Mxfp4Q8 {
  static constexpr int kSuper = kMxfp4Super;
  static constexpr int kCodeBytes = 16, kScaleBytes = 1;  // per 32-element block

  template <int MR, int NR>
  STRATA_TARGET_VNNI __attribute__((always_inline)) static inline void Step(
      Accumulators<MR, NR>& acc, const TileArgs& t, int64_t p, __mmask64 code_mask,
      __mmask16 scale_mask) {
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_setr_epi8(16, 17, 18, 19, 20, 22, 24, 28, 16, 15, 14, 13, 12, 10, 8, 4));
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    // Each 16-byte lane q: byte q of the broadcast scales, zero-extended into its 4 int32 lanes
    // (vpshufb control bytes {q, 0x80, 0x80, 0x80} per int32).
    const int z = static_cast<int>(0x80808000u);
    const __m512i expand = _mm512_setr_epi32(z, z, z, z, z + 1, z + 1, z + 1, z + 1, z + 2, z + 2,
                                             z + 2, z + 2, z + 3, z + 3, z + 3, z + 3);
    const auto* x = static_cast<const uint8_t*>(t.x) + 2 * p;
    const int64_t ldx_bytes = 2 * t.ldx;
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m512i bytes =
          _mm512_maskz_loadu_epi8(code_mask, static_cast<const uint8_t*>(t.w[j]) + p / 2);
      const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(bytes, nibble));
      const __m512i hi =
          _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble));
      const __m512i e8m0 =
          _mm512_broadcastd_epi32(_mm_maskz_loadu_epi8(scale_mask, t.scales[j] + p / kQ8Block));
      const __m512 sw =
          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_shuffle_epi8(e8m0, expand), 23));
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const uint8_t* xi = x + i * ldx_bytes;
        __m512i d = _mm512_loadu_si512(xi + 128);
        d = _mm512_dpbusd_epi32(d, lo, _mm512_loadu_si512(xi));
        d = _mm512_dpbusd_epi32(d, hi, _mm512_loadu_si512(xi + 64));
        acc[i][j] = Accumulate(acc[i][j], d, sw, xi + 192);
      }
    }
  }
};

struct Int8Q8 {
  static constexpr int kSuper = kInt8Super;
  static constexpr int kCodeBytes = 32, kScaleBytes = 2;

  template <int MR, int NR>
  STRATA_TARGET_VNNI __attribute__((always_inline)) static inline void Step(
      Accumulators<MR, NR>& acc, const TileArgs& t, int64_t p, __mmask64 code_mask,
      __mmask16 scale_mask) {
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
    // Lanes 0–7 take the low bf16 of the broadcast pair (shifted up), 8–15 the high one.
    const __m512i shifts =
        _mm512_setr_epi32(16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    const auto* x = static_cast<const uint8_t*>(t.x) + 3 * p;
    const int64_t ldx_bytes = 3 * t.ldx;
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m512i w = _mm512_xor_si512(
          _mm512_maskz_loadu_epi8(code_mask, static_cast<const int8_t*>(t.w[j]) + p), offset);
      const __m512i pair = _mm512_broadcastd_epi32(
          _mm_maskz_loadu_epi8(scale_mask, t.scales[j] + 2 * (p / kQ8Block)));
      const __m512 sw =
          _mm512_castsi512_ps(_mm512_and_si512(_mm512_sllv_epi32(pair, shifts), high_half));
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const uint8_t* xi = x + i * ldx_bytes;
        const __m512i d =
            _mm512_dpbusd_epi32(_mm512_loadu_si512(xi + 64), w, _mm512_loadu_si512(xi));
        acc[i][j] = Accumulate(acc[i][j], d, sw, xi + 128);
      }
    }
  }
};

template <typename Format, int MR, int NR>
struct VnniTile {
  STRATA_TARGET_VNNI static void Run(const TileArgs& t) {
    __m512 acc[MR][NR];
#pragma GCC unroll 16
    for (int e = 0; e < MR * NR; ++e) acc[e / NR][e % NR] = _mm512_setzero_ps();
    constexpr int kBlocks = Format::kSuper / kQ8Block;
    const int64_t full = t.kc / Format::kSuper * Format::kSuper;
    for (int64_t p = 0; p < full; p += Format::kSuper) {
      // One 64-byte line of each row per superblock.
      PrefetchNextSlice<NR>(t.w_next, p / kQ8Block * Format::kCodeBytes);
      Format::template Step<MR, NR>(
          acc, t, p, ~__mmask64{0},
          static_cast<__mmask16>((1u << (kBlocks * Format::kScaleBytes)) - 1));
    }
    if (full < t.kc) {
      const int64_t blocks = (t.kc - full) / kQ8Block;
      Format::template Step<MR, NR>(
          acc, t, full, (__mmask64{1} << (blocks * Format::kCodeBytes)) - 1,
          static_cast<__mmask16>((1u << (blocks * Format::kScaleBytes)) - 1));
    }
    StoreTile512(acc, t);
  }
};

template <int MR, int NR>
using Mxfp4VnniTile = VnniTile<Mxfp4Q8, MR, NR>;
template <int MR, int NR>
using Int8VnniTile = VnniTile<Int8Q8, MR, NR>;

}  // namespace

const TileKernels& Mxfp4VnniTiles() {
  static const TileKernels k =
      MakeTileTable<Mxfp4VnniTile, 4, 4>(XLayout::kQ8Mxfp4, kMxfp4Super, &PackQ8Mxfp4Row);
  return k;
}

const TileKernels& Int8VnniTiles() {
  static const TileKernels k =
      MakeTileTable<Int8VnniTile, 4, 4>(XLayout::kQ8Int8, kInt8Super, &PackQ8Int8Row);
  return k;
}

}  // namespace strata::kernels::cpu::internal
