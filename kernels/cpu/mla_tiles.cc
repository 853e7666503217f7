// Instantiates mla_tiles_impl.h for AVX-512 (per-function target attribute) and for the AVX2
// baseline, each with its vector traits.
#include "kernels/cpu/mla_tiles.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/avx512_intrinsics.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/internal/simd_avx2.h"
#include "kernels/cpu/internal/simd_exp.h"

namespace strata::kernels::cpu::mla {
namespace {

// e^x: the shared Cephes expf of internal/simd_exp.h (≤ 2 ulp; exactly 0 below −87.33).

namespace avx512 {

#define MLA_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

struct V {
  using Vec = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kDotRows = 4, kDotCols = 4;          // 16 accumulators
  static constexpr int kAxpyQueries = 4, kAxpyVectors = 4;  // 16 accumulators
  // Lane tiles (2 query vectors): scores 8 rows × 2, values 8 columns × 2 (16 accumulators).
  static constexpr int kLaneScoreRows = 8, kLaneValueCols = 8;

  MLA_TARGET static __mmask16 Mask(int count) {
    return count >= 16  ? __mmask16(0xFFFF)
           : count <= 0 ? __mmask16(0)
                        : __mmask16((1u << count) - 1);
  }
  MLA_TARGET static Vec Zero() { return _mm512_setzero_ps(); }
  MLA_TARGET static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  MLA_TARGET static Vec LoadPartial(const float* p, int n) {
    return _mm512_maskz_loadu_ps(Mask(n), p);
  }
  // bf16 bits widened exactly (the bits become the top half of the f32).
  MLA_TARGET static Vec Load(const uint16_t* p) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  MLA_TARGET static Vec LoadPartial(const uint16_t* p, int n) {
    const __m256i bits = _mm256_maskz_loadu_epi16(Mask(n), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  MLA_TARGET static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  MLA_TARGET static void StorePartial(float* p, Vec v, int n) {
    _mm512_mask_storeu_ps(p, Mask(n), v);
  }
  MLA_TARGET static Vec Set1(float x) { return _mm512_set1_ps(x); }
  MLA_TARGET static Vec Add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  MLA_TARGET static Vec Sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  MLA_TARGET static Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  MLA_TARGET static Vec Div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
  MLA_TARGET static Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  MLA_TARGET static Vec KeepFirst(Vec v, int n) { return _mm512_maskz_mov_ps(Mask(n), v); }
  MLA_TARGET static Vec Max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
  // s where row < limit, else −inf.
  MLA_TARGET static Vec MaskFromRow(Vec s, Vec limit, float row) {
    const __mmask16 visible = _mm512_cmp_ps_mask(_mm512_set1_ps(row), limit, _CMP_LT_OQ);
    return _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), visible, s);
  }
  MLA_TARGET static Vec ZeroIfNegInf(Vec v) {
    const __mmask16 neg_inf =
        _mm512_cmp_ps_mask(v, _mm512_set1_ps(-std::numeric_limits<float>::infinity()), _CMP_EQ_OQ);
    return _mm512_mask_mov_ps(v, neg_inf, _mm512_setzero_ps());
  }
  // ((l0+l2)+(l1+l3)) within each 128-bit lane, then (L0+L1)+(L2+L3).
  MLA_TARGET static float ReduceAdd(Vec v) {
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
    return _mm512_cvtss_f32(v);
  }
  MLA_TARGET static Vec Exp(Vec x) { return internal::Exp512(x); }
  // 2^x for x ≤ 0 (the lane tiles' base-2 softmax): degree-6 Taylor polynomial of 2^f on
  // f ∈ [−½, ½] (relative error ≤ 1.3e-7), scaled by 2^n; x ≤ −200 (and −inf) gives exactly 0.
  MLA_TARGET static Vec Exp2(Vec x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-200.0f));
    const Vec n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_scalef_ps(internal::Exp2Poly(_mm512_sub_ps(x, n)), n);
  }
  // sums[e] = Σ lanes of acc[e / 4][e % 4], by a transposing tree.
  MLA_TARGET static void ReduceTile(const Vec (&a)[4][4], float* sums) {
    Vec t[8];
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      const Vec lo = a[q / 2][2 * (q % 2)], hi = a[q / 2][2 * (q % 2) + 1];
      t[q] = _mm512_add_ps(_mm512_unpacklo_ps(lo, hi), _mm512_unpackhi_ps(lo, hi));
    }
    Vec u[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      u[q] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * q], t[2 * q + 1], 0x44),
                           _mm512_shuffle_ps(t[2 * q], t[2 * q + 1], 0xEE));
    }
    const Vec v0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88),
                                 _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
    const Vec v1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88),
                                 _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
    _mm512_storeu_ps(sums, _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x88),
                                         _mm512_shuffle_f32x4(v0, v1, 0xDD)));
  }
};

#include "kernels/cpu/mla_tiles_impl.h"  // NOLINT(build/include)

// After mla_tiles_impl.h: uses its V, SoftmaxStep and kernels.
#include "kernels/cpu/mla_tiles_bf16_impl.h"  // NOLINT(build/include)

#undef MLA_TARGET

}  // namespace avx512

namespace avx2 {

#define MLA_TARGET

struct V {
  using Vec = __m256;
  static constexpr int kWidth = 8;
  // 12 accumulators each: with 2 FMA pipes of 5-cycle latency 8 (2 × 4) capped the tiles at 80 %
  // of the FMA rate. Dot: 12 + 3 row vectors + 1 query vector; axpy: 12 + 3 source vectors + 1
  // coefficient: the 16 ymm registers.
  static constexpr int kDotRows = 4, kDotCols = 3;
  static constexpr int kAxpyQueries = 4, kAxpyVectors = 3;
  // Lane tiles (4 query vectors): scores 2 rows × 4, values 2 columns × 4 (8 accumulators +
  // 4 query or probability vectors + 1 broadcast).
  static constexpr int kLaneScoreRows = 2, kLaneValueCols = 2;

  static __m256i Mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Vec Zero() { return _mm256_setzero_ps(); }
  static Vec Load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec LoadPartial(const float* p, int n) { return _mm256_maskload_ps(p, Mask(n)); }
  // bf16 bits widened exactly (the bits become the top half of the f32).
  static Vec Load(const uint16_t* p) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
  static Vec LoadPartial(const uint16_t* p, int n) {
    alignas(16) uint16_t bits[kWidth] = {};
    std::memcpy(bits, p, sizeof(uint16_t) * static_cast<size_t>(n));
    return Load(bits);
  }
  static void Store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static void StorePartial(float* p, Vec v, int n) { _mm256_maskstore_ps(p, Mask(n), v); }
  static Vec Set1(float x) { return _mm256_set1_ps(x); }
  static Vec Add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec Sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec Mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec Div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec KeepFirst(Vec v, int n) { return _mm256_and_ps(v, _mm256_castsi256_ps(Mask(n))); }
  static Vec Max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
  // s where row < limit, else −inf.
  static Vec MaskFromRow(Vec s, Vec limit, float row) {
    const Vec visible = _mm256_cmp_ps(_mm256_set1_ps(row), limit, _CMP_LT_OQ);
    return _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()), s, visible);
  }
  static Vec ZeroIfNegInf(Vec v) {
    const Vec neg_inf =
        _mm256_cmp_ps(v, _mm256_set1_ps(-std::numeric_limits<float>::infinity()), _CMP_EQ_OQ);
    return _mm256_andnot_ps(neg_inf, v);
  }
  // ((l0+l2)+(l1+l3)) within each 128-bit lane, then L0+L1.
  static float ReduceAdd(Vec v) {
    v = _mm256_add_ps(v, _mm256_permute_ps(v, 0x4E));
    v = _mm256_add_ps(v, _mm256_permute_ps(v, 0xB1));
    v = _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 0x01));
    return _mm256_cvtss_f32(v);
  }
  static Vec Exp(Vec x) { return internal::Exp256(x); }
  // 2^x for x ≤ 0, as the AVX-512 Exp2; below −126 (and −inf) exactly 0.
  static Vec Exp2(Vec x) {
    const Vec keep = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
    const Vec n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const Vec p = internal::Exp2Poly(_mm256_sub_ps(x, n));
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), keep);
  }
  // sums[i * 3 + j] = ReduceAdd(acc[i][j]) (the same tree), four rows at a time per column.
  static void ReduceTile(const Vec (&a)[4][3], float* sums) {
#pragma GCC unroll 3
    for (int j = 0; j < 3; ++j) {
      const Vec column[4] = {a[0][j], a[1][j], a[2][j], a[3][j]};
      alignas(16) float r[4];
      _mm_store_ps(r, internal::Reduce4(column));
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) sums[i * 3 + j] = r[i];
    }
  }
};

#include "kernels/cpu/mla_tiles_impl.h"  // NOLINT(build/include)

#undef MLA_TARGET

}  // namespace avx2
}  // namespace

const TileKernels& TileKernelsFor(Isa isa) {
  CHECK(isa != Isa::kScalar) << "the MLA tile kernels need AVX2";
  if (isa >= Isa::kAvx512Bf16) return avx512::kTileKernelsBf16;
  return isa >= Isa::kAvx512 ? avx512::kTileKernels : avx2::kTileKernels;
}

namespace {

// A set of lambdas as one overloaded callable (one per row type below).
template <class... Fns>
struct Overloaded : Fns... {
  using Fns::operator()...;
};

void CheckKvbFormat(const MatmulWeights& w) {
  CHECK(w.format == WeightFormat::kF32 || w.format == WeightFormat::kBf16)
      << "the MLA kernels read kv_b_proj in f32 or bf16";
}

// Calls fn(rows) with rows[j] = row first_row + j of w, j < count ≤ kMaxSources, as
// const float* (f32) or const uint16_t* (bf16 bits).
template <typename Fn>
void WithWeightRows(const MatmulWeights& w, int64_t first_row, int count, Fn&& fn) {
  CHECK_LE(count, kMaxSources);
  CheckKvbFormat(w);
  auto call = [&](const auto* base) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(base)>>;
    const T* rows[kMaxSources];
    for (int j = 0; j < count; ++j) rows[j] = base + (first_row + j) * w.k;
    fn(rows);
  };
  if (w.format == WeightFormat::kBf16) {
    call(static_cast<const uint16_t*>(w.data));
  } else {
    call(static_cast<const float*>(w.data));
  }
}

}  // namespace

void DotsWeightRows(const TileKernels& k, const float* const* a, int na, const MatmulWeights& w,
                    int64_t first_row, int nb, float* const* out) {
  const int width = static_cast<int>(w.k);
  WithWeightRows(
      w, first_row, nb,
      Overloaded{[&](const float* const* b) { k.dots(a, na, b, nb, width, out); },
                 [&](const uint16_t* const* b) { k.dots_bf16w(a, na, b, nb, width, out); }});
}

void AxpyWeightRows(const TileKernels& k, float* const* out, int n, const float* init,
                    const float* const* coef, const MatmulWeights& w, int64_t first_row, int nsrc) {
  const int width = static_cast<int>(w.k);
  WithWeightRows(
      w, first_row, nsrc,
      Overloaded{
          [&](const float* const* src) { k.axpy(out, n, init, coef, src, nsrc, width); },
          [&](const uint16_t* const* src) { k.axpy_bf16w(out, n, init, coef, src, nsrc, width); }});
}

std::vector<float> KvbAsF32(const MatmulWeights& w_kvb) {
  CheckKvbFormat(w_kvb);
  const size_t count = static_cast<size_t>(w_kvb.n * w_kvb.k);
  std::vector<float> out(count);
  ConvertToF32(w_kvb.format == WeightFormat::kBf16 ? DType::kBF16 : DType::kF32, w_kvb.data, count,
               out.data());
  return out;
}

void Absorb(const TileKernels& k, const MatmulWeights& w_kvb, int h, const MlaDims& d,
            const float* const* q, int n, float* const* out) {
  CHECK_LE(n, kMaxQueries);
  const int dn = d.qk_nope_head_dim, r = d.kv_lora_rank;
  CHECK_EQ(w_kvb.k, r);
  const int64_t first_row = int64_t{h} * (dn + d.v_head_dim);
  // W_UK rows in chunks of kMaxSources; the accumulator round-trips through `out` exactly.
  const float* coef[kMaxQueries];
  float ones[kMaxQueries];
  std::fill(ones, ones + n, 1.0f);
  for (int a0 = 0; a0 < dn; a0 += kMaxSources) {
    const int na = std::min(kMaxSources, dn - a0);
    for (int i = 0; i < n; ++i) coef[i] = q[i] + a0;
    AxpyWeightRows(k, out, n, a0 == 0 ? nullptr : ones, coef, w_kvb, first_row + a0, na);
  }
  if (dn == 0) {
    for (int i = 0; i < n; ++i) std::fill(out[i], out[i] + r, 0.0f);
  }
  for (int i = 0; i < n; ++i) {
    std::copy(q[i] + dn, q[i] + dn + d.qk_rope_head_dim, out[i] + r);
  }
}

void UpProject(const TileKernels& k, const MatmulWeights& w_kvb, int h, const MlaDims& d,
               const float* const* x, int n, const float* const* gate, float* const* o) {
  CHECK_LE(n, kMaxQueries);
  const int dn = d.qk_nope_head_dim, dv = d.v_head_dim;
  CHECK_EQ(w_kvb.k, d.kv_lora_rank);
  const int64_t first_row = int64_t{h} * (dn + dv) + dn;
  float* out[kMaxQueries];
  for (int c0 = 0; c0 < dv; c0 += kMaxSources) {
    const int nc = std::min(kMaxSources, dv - c0);
    for (int i = 0; i < n; ++i) out[i] = o[i] + c0;
    DotsWeightRows(k, x, n, w_kvb, first_row + c0, nc, out);
  }
  for (int i = 0; i < n; ++i) {
    if (gate[i] != nullptr) k.gate(o[i], gate[i], dv);
  }
}

}  // namespace strata::kernels::cpu::mla
