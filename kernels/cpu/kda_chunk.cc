// KdaPrefill / KdaChunk: one generic implementation (kda_simd.h vectors of W lanes)
// instantiated for AVX-512 (W = 16) and AVX2 (W = 8). Every per-head array is padded to
// Dp = round_up(D, 16) channels with zeros, so all vector loops run on whole vectors.
//
// Per (sequence, head) task:  state [D, D] → S [Dp, Dp] (padded copy)
//   for each chunk of n ≤ C tokens:
//     rows:  q, k, v, g, gate [C, Dp], β [C]        (prefill: conv + SiLU + norms + gate)
//     decay: G64 [C, Dp] f64 cumsum → kp, qp, kf, qf [C, Dp];  knT, kendT [Dp, C];  e^{G_last} [Dp]
//     L, A [C, C] = kf·knT, qf·knT (+ pairwise unsafe channels) → X = kp·S → U (in X)
//     O = qp·S + A·U;  S = Diag(e^{G_last}) S + kendT·U
//     out:   O → GatedRmsNorm → y rows   (KdaChunk: O → o rows)
//   S → state
#include "kernels/cpu/kda_chunk.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/avx512_intrinsics.h"
#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels/cpu/internal/simd_avx512.h"
#include "kernels/cpu/kda_simd.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu {
namespace {

using kda::CopyPadded;
using kda::HeadParams;
using kda::Load;
using kda::PadTo16;
using kda::Store;
using kda::VF;

// Largest |exponent| of one factor of the factorised decay (e^60 ≈ 1e26: products of two factors
// and a key stay far from overflow, and e^-60·|k| stays normal for |k| > 1e-12).
constexpr double kMaxFactorExponent = 60.0;

// Largest chunk (CheckChunkSize).
constexpr int64_t kMaxChunk = 64;

template <int W>
struct VecD {
  typedef double D __attribute__((vector_size(8 * W)));
};
template <int W>
using VD = typename VecD<W>::D;

template <int W>
KDA_INLINE VD<W> LoadD(const double* p) {
  VD<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <int W>
KDA_INLINE VF<W> ToFloat(const VD<W>& v) {
  return __builtin_convertvector(v, VF<W>);
}

// One thread's arrays for one head (carved from ThreadScratch; see the file comment).
struct ChunkBuffers {
  int64_t dp = 0, chunk = 0;
  float* params;                                            // HeadParamsFloats
  float* s;                                                 // [Dp, Dp]
  float* raw;                                               // [3, K−1+C, Dp] pre-conv window rows
  float *q, *k, *v, *g, *gate, *kp, *qp, *kf, *qf, *x, *o;  // [C, Dp]
  float *kn_t, *kend_t;                                     // [Dp, C]
  float *lmat, *amat;                                       // [C, C]
  float *beta, *safe, *decay_last;                          // [C], [Dp], [Dp]
  double *g64, *ref64;                                      // [C, Dp], [Dp]
};

int64_t ChunkScratchFloats(int kernel, int64_t dp, int64_t chunk) {
  return kda::HeadParamsFloats(kernel, dp) + dp * dp + 3 * (kernel - 1 + chunk) * dp +
         11 * chunk * dp + 2 * dp * chunk + 2 * chunk * chunk + chunk + 2 * dp +
         2 * (chunk * dp + dp);
}

ChunkBuffers CarveBuffers(float* scratch, int kernel, int64_t dp, int64_t chunk) {
  ChunkBuffers b;
  b.dp = dp;
  b.chunk = chunk;
  float* next = scratch;
  auto take = [&next](int64_t count) {
    float* p = next;
    next += count;
    return p;
  };
  b.params = take(kda::HeadParamsFloats(kernel, dp));
  b.s = take(dp * dp);
  b.raw = take(3 * (kernel - 1 + chunk) * dp);
  for (float** a : {&b.q, &b.k, &b.v, &b.g, &b.gate, &b.kp, &b.qp, &b.kf, &b.qf, &b.x, &b.o}) {
    *a = take(chunk * dp);
  }
  b.kn_t = take(dp * chunk);
  b.kend_t = take(dp * chunk);
  b.lmat = take(chunk * chunk);
  b.amat = take(chunk * chunk);
  b.beta = take(chunk);
  b.safe = take(dp);
  b.decay_last = take(dp);
  b.g64 = reinterpret_cast<double*>(take(2 * chunk * dp));
  b.ref64 = reinterpret_cast<double*>(take(2 * dp));
  return b;
}

// ---- small GEMMs: out[m, ncols] (op)= Σ_p A(r, p) · B[p, j], A(r, p) = a[r·a_rs + p·a_ps] ----

enum class Accumulate {
  kOverwrite,
  kAdd,
  kScaleRows
};  // out = A·B | out += A·B | out = s_r·out + A·B

template <int W, int MR, int NV>
KDA_INLINE void GemmTile(int64_t kdim, const float* a, int64_t a_rs, int64_t a_ps, const float* b,
                         int64_t ldb, float* out, int64_t ldo, Accumulate mode,
                         const float* row_scale) {
  VF<W> acc[MR][NV];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
    const float scale = mode == Accumulate::kScaleRows ? row_scale[r] : 1.0f;
#pragma GCC unroll 4
    for (int n = 0; n < NV; ++n) {
      acc[r][n] = mode == Accumulate::kOverwrite ? VF<W>{} : Load<W>(out + r * ldo + n * W) * scale;
    }
  }
  for (int64_t p = 0; p < kdim; ++p) {
    VF<W> bv[NV];
#pragma GCC unroll 4
    for (int n = 0; n < NV; ++n) bv[n] = Load<W>(b + p * ldb + n * W);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const float av = a[r * a_rs + p * a_ps];
#pragma GCC unroll 4
      for (int n = 0; n < NV; ++n) acc[r][n] = acc[r][n] + av * bv[n];
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int n = 0; n < NV; ++n) Store<W>(out + r * ldo + n * W, acc[r][n]);
  }
}

// Columns [j0, j0 + kNV·W) of all m rows: row tiles of MR, then single rows.
template <int W, int MR, int kNV>
KDA_INLINE void GemmColumns(int64_t m, int64_t j0, int64_t kdim, const float* a, int64_t a_rs,
                            int64_t a_ps, const float* b, int64_t ldb, float* out, int64_t ldo,
                            Accumulate mode, const float* row_scale) {
  int64_t r0 = 0;
  for (; r0 + MR <= m; r0 += MR) {
    GemmTile<W, MR, kNV>(kdim, a + r0 * a_rs, a_rs, a_ps, b + j0, ldb, out + r0 * ldo + j0, ldo,
                         mode, row_scale + (row_scale != nullptr ? r0 : 0));
  }
  for (; r0 < m; ++r0) {
    GemmTile<W, 1, kNV>(kdim, a + r0 * a_rs, a_rs, a_ps, b + j0, ldb, out + r0 * ldo + j0, ldo,
                        mode, row_scale + (row_scale != nullptr ? r0 : 0));
  }
}

// ncols: a multiple of W. Column blocks of NV vectors outside, row tiles of MR inside.
template <int W, int MR, int NV>
KDA_INLINE void Gemm(int64_t m, int64_t ncols, int64_t kdim, const float* a, int64_t a_rs,
                     int64_t a_ps, const float* b, int64_t ldb, float* out, int64_t ldo,
                     Accumulate mode, const float* row_scale = nullptr) {
  int64_t j0 = 0;
  for (; j0 + NV * W <= ncols; j0 += NV * W) {
    GemmColumns<W, MR, NV>(m, j0, kdim, a, a_rs, a_ps, b, ldb, out, ldo, mode, row_scale);
  }
  for (; j0 < ncols; j0 += W) {
    GemmColumns<W, MR, 1>(m, j0, kdim, a, a_rs, a_ps, b, ldb, out, ldo, mode, row_scale);
  }
}

// ---- the chunk step ----

// G64 = cumulative g (f64), the factorisation reference and safety per channel, and the decayed
// operands kp, qp, kf, qf, knT, kendT, e^{G_last}.
template <int W>
KDA_INLINE void DecayOperands(const ChunkBuffers& b, int64_t n) {
  const int64_t dp = b.dp, chunk = b.chunk;
  for (int64_t c = 0; c < dp; ++c) b.g64[c] = b.g[c];
  for (int64_t r = 1; r < n; ++r) {
    for (int64_t c = 0; c < dp; ++c) b.g64[r * dp + c] = b.g64[(r - 1) * dp + c] + b.g[r * dp + c];
  }
  const double* last = b.g64 + (n - 1) * dp;
  for (int64_t c = 0; c < dp; ++c) {
    const bool safe = -last[c] <= 2.0 * kMaxFactorExponent;
    b.safe[c] = safe ? 1.0f : 0.0f;
    b.ref64[c] = safe ? 0.5 * last[c] : 0.0;
  }
  for (int64_t c = 0; c < dp; c += W) {
    Store<W>(b.decay_last + c, kda::Exp<W>(ToFloat<W>(LoadD<W>(last + c))));
  }
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < dp; c += W) {
      // e^{G_r} and e^{G_last−G_r} from their own exponents (each ≤ 0, small where the weight is
      // large, so one rounding keeps them accurate); e^{G−ref} and e^{ref−G}: both factors
      // within [e^-60, e^60] on safe channels, zeroed on the others.
      // e^{ref−G} from its own exponent: an exponential costs less than a division.
      const VD<W> gr = LoadD<W>(b.g64 + r * dp + c);
      const VF<W> e_g = kda::Exp<W>(ToFloat<W>(gr));
      const VF<W> e_end = kda::Exp<W>(ToFloat<W>(LoadD<W>(last + c) - gr));
      const VF<W> fwd = ToFloat<W>(gr - LoadD<W>(b.ref64 + c));
      const VF<W> e_fwd = kda::Exp<W>(fwd);
      const VF<W> e_bwd = kda::Exp<W>(-fwd);
      const auto safe = Load<W>(b.safe + c) > 0.5f;
      const VF<W> kv = Load<W>(b.k + r * dp + c), qv = Load<W>(b.q + r * dp + c);
      Store<W>(b.kp + r * dp + c, kv * e_g);
      Store<W>(b.qp + r * dp + c, qv * e_g);
      Store<W>(b.kf + r * dp + c, safe ? kv * e_fwd : VF<W>{});
      Store<W>(b.qf + r * dp + c, safe ? qv * e_fwd : VF<W>{});
      const VF<W> kn = safe ? kv * e_bwd : VF<W>{};
      const VF<W> kend = kv * e_end;
      for (int l = 0; l < W; ++l) {
        b.kn_t[(c + l) * chunk + r] = kn[l];
        b.kend_t[(c + l) * chunk + r] = kend[l];
      }
    }
  }
}

// Unsafe channels (decay span > 2·kMaxFactorExponent) of L and A, pairwise from f64 exponents:
// for each row r, the W columns s0 .. s0+W−1 at once (lanes past r masked: their exponents
// are positive and may overflow).
template <int W>
KDA_INLINE void AddUnsafeChannels(const ChunkBuffers& b, int64_t n, int64_t d) {
  const int64_t dp = b.dp, chunk = b.chunk;
  alignas(64) float k_col[kMaxChunk];
  alignas(64) double g_col[kMaxChunk];
  VF<W> lane;
  for (int l = 0; l < W; ++l) lane[l] = static_cast<float>(l);
  for (int64_t c = 0; c < d; ++c) {
    if (b.safe[c] > 0.5f) continue;
    for (int64_t s = 0; s < chunk; ++s) {  // zero past n: whole vectors, masked lanes finite
      k_col[s] = s < n ? b.k[s * dp + c] : 0.0f;
      g_col[s] = s < n ? b.g64[s * dp + c] : 0.0;
    }
    for (int64_t r = 0; r < n; ++r) {
      const float kr = b.k[r * dp + c], qr = b.q[r * dp + c];
      const double gr = b.g64[r * dp + c];
      for (int64_t s0 = 0; s0 <= r; s0 += W) {
        const VF<W> s = lane + static_cast<float>(s0);
        const VF<W> decay = kda::Exp<W>(ToFloat<W>(gr - LoadD<W>(g_col + s0)));
        const VF<W> ks = s <= static_cast<float>(r) ? Load<W>(k_col + s0) * decay : VF<W>{};
        float* l_row = b.lmat + r * chunk + s0;
        float* a_row = b.amat + r * chunk + s0;
        Store<W>(l_row, Load<W>(l_row) + (s < static_cast<float>(r) ? kr * ks : VF<W>{}));
        Store<W>(a_row, Load<W>(a_row) + qr * ks);
      }
    }
  }
}

// Columns [c0, c0 + NB·W) of U_r = β_r (v_r − X_r − Σ_{s<r} L_rs U_s): NB independent
// accumulators, so the sum over s is not one chain of dependent FMAs.
template <int W, int NB>
KDA_INLINE void SolveColumns(const ChunkBuffers& b, int64_t r, int64_t c0) {
  const int64_t dp = b.dp;
  VF<W> acc[NB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
    acc[j] = Load<W>(b.v + r * dp + c0 + j * W) - Load<W>(b.x + r * dp + c0 + j * W);
  }
  for (int64_t s = 0; s < r; ++s) {
    const float l = b.lmat[r * b.chunk + s];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) acc[j] = acc[j] - l * Load<W>(b.x + s * dp + c0 + j * W);
  }
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) Store<W>(b.x + r * dp + c0 + j * W, b.beta[r] * acc[j]);
}

// U_r = β_r (v_r − X_r − Σ_{s<r} L_rs U_s), in place of X (L without β, strictly lower part).
template <int W>
KDA_INLINE void SolvePseudoValues(const ChunkBuffers& b, int64_t n) {
  for (int64_t r = 0; r < n; ++r) {
    int64_t c0 = 0;
    for (; c0 + 8 * W <= b.dp; c0 += 8 * W) SolveColumns<W, 8>(b, r, c0);
    for (; c0 + 4 * W <= b.dp; c0 += 4 * W) SolveColumns<W, 4>(b, r, c0);
    for (; c0 < b.dp; c0 += W) SolveColumns<W, 1>(b, r, c0);
  }
}

// One chunk of n rows (q, k, v, g, β filled): O rows in b.o, S advanced past the chunk.
template <int W, int MR, int NV>
KDA_INLINE void ChunkStep(const ChunkBuffers& b, int64_t n, int64_t d) {
  const int64_t dp = b.dp, chunk = b.chunk, ncols = PadTo16(n);
  DecayOperands<W>(b, n);
  Gemm<W, MR, NV>(n, ncols, dp, b.kf, dp, 1, b.kn_t, chunk, b.lmat, chunk, Accumulate::kOverwrite);
  Gemm<W, MR, NV>(n, ncols, dp, b.qf, dp, 1, b.kn_t, chunk, b.amat, chunk, Accumulate::kOverwrite);
  AddUnsafeChannels<W>(b, n, d);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t s = r + 1; s < n; ++s) b.amat[r * chunk + s] = 0.0f;
  }
  Gemm<W, MR, NV>(n, dp, dp, b.kp, dp, 1, b.s, dp, b.x, dp, Accumulate::kOverwrite);
  SolvePseudoValues<W>(b, n);
  Gemm<W, MR, NV>(n, dp, dp, b.qp, dp, 1, b.s, dp, b.o, dp, Accumulate::kOverwrite);
  Gemm<W, MR, NV>(n, dp, n, b.amat, chunk, 1, b.x, dp, b.o, dp, Accumulate::kAdd);
  Gemm<W, MR, NV>(dp, dp, n, b.kend_t, chunk, 1, b.x, dp, b.s, dp, Accumulate::kScaleRows,
                  b.decay_last);
}

void LoadState(const float* state, int64_t d, float* s, int64_t dp) {
  for (int64_t i = 0; i < d; ++i) CopyPadded(s + i * dp, state + i * d, d, dp);
  std::memset(s + d * dp, 0, static_cast<size_t>((dp - d) * dp) * sizeof(float));
}

void StoreState(const float* s, int64_t dp, int64_t d, float* state) {
  for (int64_t i = 0; i < d; ++i) {
    std::memcpy(state + i * d, s + i * dp, static_cast<size_t>(d) * sizeof(float));
  }
}

// ---- KdaPrefill: rows of one chunk of one (sequence, head) ----

// Virtual row v of [conv cache (K−1 rows); the sequence's new rows] for input w of head h.
inline const float* VirtualRow(const KdaLayerParams& p, const KdaSequence& seq, const float* raw,
                               int w, int h, int64_t v) {
  const int64_t hist = p.conv_kernel_size - 1, width = int64_t{p.num_heads} * p.head_dim;
  if (v < hist) return seq.conv + (w * hist + v) * width + h * p.head_dim;
  return raw + (seq.row_offset + v - hist) * width + h * p.head_dim;
}

// Rows prefetched ahead of the copy in GatherRows. A task reads D floats per row at a stride
// of P floats: the hardware prefetchers do not follow it, and at power-of-two strides lines
// prefetched a whole chunk ahead evict each other in L2, so the copies waited on DRAM one row
// at a time (~25 % of a prefill, perf, D = 128, P = 4096).
constexpr int64_t kPrefetchRowsAhead = 6;

// Virtual row i (relative to t0) of q, k, v, and from row K−1 on the token row i − K + 1 of f
// and gate: prefetched into L1/L2.
inline void PrefetchRow(const KdaLayerParams& p, const KdaSequence& seq, const KdaRows& rows, int h,
                        int64_t t0, int64_t i) {
  const int64_t d = p.head_dim, hist = p.conv_kernel_size - 1;
  const float* raw[3] = {rows.q, rows.k, rows.v};
  for (int w = 0; w < 3; ++w) {
    const float* src = VirtualRow(p, seq, raw[w], w, h, t0 + i);
    for (int64_t c = 0; c < d; c += 16) __builtin_prefetch(src + c, 0, 3);
  }
  if (i < hist) return;
  const int64_t at = (seq.row_offset + t0 + i - hist) * p.num_heads * d + h * d;
  for (int64_t c = 0; c < d; c += 16) {
    __builtin_prefetch(rows.f + at + c, 0, 3);
    __builtin_prefetch(rows.gate + at + c, 0, 3);
  }
}

// The chunk's inputs into padded buffers: window rows of q, k, v (b.raw), f (b.g, turned into
// g in place later) and gate (b.gate).
inline void GatherRows(const KdaLayerParams& p, const KdaSequence& seq, const KdaRows& rows, int h,
                       int64_t t0, int64_t n, const ChunkBuffers& b) {
  const int64_t d = p.head_dim, dp = b.dp, hist = p.conv_kernel_size - 1;
  const int64_t width = int64_t{p.num_heads} * d, window_rows = hist + b.chunk;
  const float* raw[3] = {rows.q, rows.k, rows.v};
  const int64_t count = n + hist;  // virtual rows t0 .. t0 + count − 1
  for (int64_t i = 0; i < std::min(kPrefetchRowsAhead, count); ++i) {
    PrefetchRow(p, seq, rows, h, t0, i);
  }
  for (int64_t i = 0; i < count; ++i) {
    if (i + kPrefetchRowsAhead < count) PrefetchRow(p, seq, rows, h, t0, i + kPrefetchRowsAhead);
    for (int w = 0; w < 3; ++w) {
      CopyPadded(b.raw + (w * window_rows + i) * dp, VirtualRow(p, seq, raw[w], w, h, t0 + i), d,
                 dp);
    }
    if (i < hist) continue;
    const int64_t r = i - hist, at = (seq.row_offset + t0 + r) * width + h * d;
    CopyPadded(b.g + r * dp, rows.f + at, d, dp);
    CopyPadded(b.gate + r * dp, rows.gate + at, d, dp);
  }
}

template <int W>
KDA_INLINE void PrefillRows(const KdaLayerParams& p, const HeadParams& hp, int h,
                            const KdaSequence& seq, const KdaRows& rows, int64_t t0, int64_t n,
                            const ChunkBuffers& b) {
  const int kernel = p.conv_kernel_size;
  const int64_t d = p.head_dim, dp = b.dp;
  GatherRows(p, seq, rows, h, t0, n, b);
  float* out[3] = {b.q, b.k, b.v};
  const int64_t window_rows = kernel - 1 + b.chunk;
  for (int w = 0; w < 3; ++w) {
    const float* buf = b.raw + w * window_rows * dp;  // row i = virtual row t0 + i
    for (int64_t r = 0; r < n; ++r) {
      const float* window[kKdaMaxConvKernel];
      for (int j = 0; j < kernel; ++j) window[j] = buf + (r + j) * dp;
      kda::ConvSilu<W>(window, hp.conv_t[w], kernel, dp, out[w] + r * dp);
    }
  }
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t r = 0; r < n; ++r) {
    kda::L2Normalize<W>(b.q + r * dp, dp, p.l2_norm_eps, q_scale);
    kda::L2Normalize<W>(b.k + r * dp, dp, p.l2_norm_eps, 1.0f);
    kda::LogDecay<W>(b.g + r * dp, hp, p.has_gate_lower_bound, p.gate_lower_bound, d, dp,
                     b.g + r * dp);  // f → g in place
    b.beta[r] = kda::Beta(rows.b[(seq.row_offset + t0 + r) * p.num_heads + h]);
  }
}

// After the last chunk: the conv cache keeps virtual rows T .. T+K−2 (ascending order reads
// each old row before it is overwritten).
inline void UpdateConvCache(const KdaLayerParams& p, const KdaSequence& seq, const KdaRows& rows,
                            int h) {
  const int64_t hist = p.conv_kernel_size - 1, width = int64_t{p.num_heads} * p.head_dim;
  const float* raw[3] = {rows.q, rows.k, rows.v};
  for (int w = 0; w < 3; ++w) {
    for (int64_t j = 0; j < hist; ++j) {
      float* dst = seq.conv + (w * hist + j) * width + h * p.head_dim;
      std::memmove(dst, VirtualRow(p, seq, raw[w], w, h, seq.num_tokens + j),
                   static_cast<size_t>(p.head_dim) * sizeof(float));
    }
  }
}

template <int W, int MR, int NV>
KDA_INLINE void PrefillTask(const KdaLayerParams& p, int h, const KdaSequence& seq,
                            const KdaRows& rows, const ChunkBuffers& b, float* y) {
  const int64_t d = p.head_dim, dp = b.dp, width = int64_t{p.num_heads} * d;
  const HeadParams hp = kda::PrepareHeadParams(p, h, dp, b.params);
  float* state = seq.state + h * d * d;
  LoadState(state, d, b.s, dp);
  for (int64_t t0 = 0; t0 < seq.num_tokens; t0 += b.chunk) {
    const int64_t n = std::min(b.chunk, seq.num_tokens - t0);
    PrefillRows<W>(p, hp, h, seq, rows, t0, n, b);
    ChunkStep<W, MR, NV>(b, n, d);
    for (int64_t r = 0; r < n; ++r) {
      // Through b.kp (free now) so that only d lanes reach y.
      kda::GatedRmsNorm<W>(b.o + r * dp, b.gate + r * dp, hp.o_norm, d, dp, p.o_norm_eps, b.kp);
      std::memcpy(y + (seq.row_offset + t0 + r) * width + h * d, b.kp,
                  static_cast<size_t>(d) * sizeof(float));
    }
  }
  if (!seq.update_caches) return;
  StoreState(b.s, dp, d, state);
  UpdateConvCache(p, seq, rows, h);
}

struct PrefillJob {
  const KdaLayerParams* p;
  const KdaSequence* seqs;
  const KdaRows* rows;
  int chunk;
  float* y;
};

// Task = (sequence, head), sequence-major.
template <int W, int MR, int NV>
KDA_INLINE void PrefillTaskOf(const PrefillJob& job, int64_t task) {
  const KdaLayerParams& p = *job.p;
  const int64_t dp = PadTo16(p.head_dim);
  float* scratch = kda::ThreadScratch<1>(ChunkScratchFloats(p.conv_kernel_size, dp, job.chunk));
  const ChunkBuffers b = CarveBuffers(scratch, p.conv_kernel_size, dp, job.chunk);
  PrefillTask<W, MR, NV>(p, static_cast<int>(task % p.num_heads), job.seqs[task / p.num_heads],
                         *job.rows, b, job.y);
}

STRATA_TARGET_AVX512 void PrefillTaskAvx512(const PrefillJob& job, int64_t task) {
  PrefillTaskOf<16, 4, 4>(job, task);
}

void PrefillTaskAvx2(const PrefillJob& job, int64_t task) { PrefillTaskOf<8, 4, 2>(job, task); }

// ---- KdaChunk: prepared inputs ----

struct ChunkInputs {
  const float *q, *k, *v, *g, *beta;
  int64_t num_tokens;
  int num_heads, head_dim;
  float* state;
  float* o;
};

template <int W, int MR, int NV>
KDA_INLINE void CoreTask(const ChunkInputs& in, int h, const ChunkBuffers& b) {
  const int64_t d = in.head_dim, dp = b.dp, width = int64_t{in.num_heads} * d;
  float* state = in.state + h * d * d;
  LoadState(state, d, b.s, dp);
  for (int64_t t0 = 0; t0 < in.num_tokens; t0 += b.chunk) {
    const int64_t n = std::min(b.chunk, in.num_tokens - t0);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t at = (t0 + r) * width + h * d;
      CopyPadded(b.q + r * dp, in.q + at, d, dp);
      CopyPadded(b.k + r * dp, in.k + at, d, dp);
      CopyPadded(b.v + r * dp, in.v + at, d, dp);
      CopyPadded(b.g + r * dp, in.g + at, d, dp);
      b.beta[r] = in.beta[(t0 + r) * in.num_heads + h];
    }
    ChunkStep<W, MR, NV>(b, n, d);
    for (int64_t r = 0; r < n; ++r) {
      std::memcpy(in.o + (t0 + r) * width + h * d, b.o + r * dp,
                  static_cast<size_t>(d) * sizeof(float));
    }
  }
  StoreState(b.s, dp, d, state);
}

template <int W, int MR, int NV>
KDA_INLINE void CoreTaskOf(const ChunkInputs& in, int chunk, int64_t h) {
  const int64_t dp = PadTo16(in.head_dim);
  float* scratch = kda::ThreadScratch<1>(ChunkScratchFloats(1, dp, chunk));
  CoreTask<W, MR, NV>(in, static_cast<int>(h), CarveBuffers(scratch, 1, dp, chunk));
}

STRATA_TARGET_AVX512 void CoreTaskAvx512(const ChunkInputs& in, int chunk, int64_t h) {
  CoreTaskOf<16, 4, 4>(in, chunk, h);
}

void CoreTaskAvx2(const ChunkInputs& in, int chunk, int64_t h) {
  CoreTaskOf<8, 4, 2>(in, chunk, h);
}

bool UseAvx512() {
  const Isa isa = ActiveIsa();
  return isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16;
}

void CheckChunkSize(int chunk_size) {
  CHECK(chunk_size >= 16 && chunk_size <= 64 && chunk_size % 16 == 0)
      << "chunk_size " << chunk_size << " (16, 32, 48 or 64)";
}

}  // namespace

void KdaPrefill(const KdaLayerParams& p, const KdaSequence* seqs, int64_t num_seqs,
                const KdaRows& rows, int chunk_size, float* y) {
  CHECK_GT(p.num_heads, 0);
  CHECK(p.head_dim > 0 && p.head_dim <= kKdaMaxHeadDim) << "head_dim " << p.head_dim;
  CHECK(p.conv_kernel_size >= 1 && p.conv_kernel_size <= kKdaMaxConvKernel);
  CHECK(!p.has_gate_lower_bound || p.gate_lower_bound < 0.0f);
  CheckChunkSize(chunk_size);
  for (int64_t s = 0; s < num_seqs; ++s) CHECK_GE(seqs[s].num_tokens, 1);
  if (num_seqs == 0) return;
  const PrefillJob job{&p, seqs, &rows, chunk_size, y};
  const auto task_fn = UseAvx512() ? PrefillTaskAvx512 : PrefillTaskAvx2;
  const int64_t num_tasks = num_seqs * p.num_heads;
  ParallelFor(num_tasks, num_tasks > 1, [&](int64_t task) { task_fn(job, task); });
}

void KdaChunk(const float* q, const float* k, const float* v, const float* g, const float* beta,
              int64_t num_tokens, int num_heads, int head_dim, int chunk_size, float* state,
              float* o) {
  CHECK_GE(num_tokens, 0);
  CHECK_GT(num_heads, 0);
  CHECK(head_dim > 0 && head_dim <= kKdaMaxHeadDim) << "head_dim " << head_dim;
  CheckChunkSize(chunk_size);
  if (num_tokens == 0) return;
  const ChunkInputs in{q, k, v, g, beta, num_tokens, num_heads, head_dim, state, o};
  const auto task_fn = UseAvx512() ? CoreTaskAvx512 : CoreTaskAvx2;
  ParallelFor(num_heads, num_heads > 1, [&](int64_t h) { task_fn(in, chunk_size, h); });
}

}  // namespace strata::kernels::cpu
