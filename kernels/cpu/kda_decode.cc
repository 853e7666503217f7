// KdaDecode: one generic implementation (kda_simd.h vectors of W lanes) instantiated for
// AVX-512 (W = 16, column blocks of 8 vectors = 128 columns) and AVX2 (W = 8, blocks of 4 vectors).
//
// Per (sequence, head) task, all vectors padded to Dp = round_up(D, 16) lanes with zeros:
//
//   conv cache rows (K−1) ─┐
//   new q/k/v row ─────────┴─ window [K, Dp] → ConvSilu → q, k, v → L2 norms
//   f row → LogDecay → g → α = e^g;  aq = α⊙q,  ak = α⊙k;  kq = k·q;  β = σ(b)
//   state, per column block J (≤ 128 columns):
//     sweep 1 (reads S):     a_J = Σ_i ak_i S[i,J],  b_J = Σ_i aq_i S[i,J]
//                            e_J = v_J − a_J,  o_J = b_J + β·kq·e_J,  u_J = β·e_J
//     sweep 2 (rewrites S):  S[i,J] = α_i S[i,J] + k_i u_J
//   o → GatedRmsNorm(gate row) → y row
#include "kernels/cpu/kda_decode.h"

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

// Below this many state elements (all sequences and heads) one thread beats waking others: a
// task streams 2·4 bytes per element, a few µs per 128×128 head.
constexpr int64_t kParallelMinStateElements = int64_t{1} << 16;

// One thread's working vectors, each [Dp] unless noted (carved from ThreadScratch).
struct DecodeBuffers {
  float* params;  // HeadParamsFloats
  float* window;  // [3, K, Dp]
  float *q, *k, *v, *f, *alpha, *aq, *ak, *gate, *o, *y;
};
constexpr int kNumVectors = 10;

int64_t DecodeScratchFloats(int kernel, int64_t dp) {
  return kda::HeadParamsFloats(kernel, dp) + 3 * kernel * dp + kNumVectors * dp;
}

DecodeBuffers CarveBuffers(float* scratch, int kernel, int64_t dp) {
  DecodeBuffers b{};
  b.params = scratch;
  b.window = b.params + kda::HeadParamsFloats(kernel, dp);
  float* next = b.window + 3 * kernel * dp;
  for (float** v : {&b.q, &b.k, &b.v, &b.f, &b.alpha, &b.aq, &b.ak, &b.gate, &b.o, &b.y}) {
    *v = next;
    next += dp;
  }
  return b;
}

// Columns [j0, j0 + NV·W) of one head's state S [d, d] (see the file comment).
template <int W, int NV>
KDA_INLINE void StateBlock(float* s, int64_t d, int64_t j0, const DecodeBuffers& b, float beta,
                           float kq) {
  VF<W> acc_k[NV] = {}, acc_q[NV] = {};
  for (int64_t i = 0; i < d; ++i) {
    const float* row = s + i * d + j0;
    const float ak = b.ak[i], aq = b.aq[i];
#pragma GCC unroll 8
    for (int n = 0; n < NV; ++n) {
      const VF<W> sv = Load<W>(row + n * W);
      acc_k[n] = acc_k[n] + sv * ak;
      acc_q[n] = acc_q[n] + sv * aq;
    }
  }
  VF<W> u[NV];
  const float beta_kq = beta * kq;
#pragma GCC unroll 8
  for (int n = 0; n < NV; ++n) {
    const VF<W> e = Load<W>(b.v + j0 + n * W) - acc_k[n];
    Store<W>(b.o + j0 + n * W, acc_q[n] + beta_kq * e);
    u[n] = beta * e;
  }
  for (int64_t i = 0; i < d; ++i) {
    float* row = s + i * d + j0;
    const float alpha = b.alpha[i], ki = b.k[i];
#pragma GCC unroll 8
    for (int n = 0; n < NV; ++n) Store<W>(row + n * W, Load<W>(row + n * W) * alpha + u[n] * ki);
  }
}

template <int W, int kMaxNV>
KDA_INLINE void StateUpdate(float* s, int64_t d, const DecodeBuffers& b, float beta, float kq) {
  int64_t j0 = 0;
  for (; j0 + kMaxNV * W <= d; j0 += kMaxNV * W) StateBlock<W, kMaxNV>(s, d, j0, b, beta, kq);
  for (; j0 + W <= d; j0 += W) StateBlock<W, 1>(s, d, j0, b, beta, kq);
  for (; j0 < d; ++j0) StateBlock<1, 1>(s, d, j0, b, beta, kq);
}

// Conv ring of one of q, k, v (w = 0, 1, 2) for head h: window = cache rows + new row,
// y = SiLU(conv(window)), then the cache drops its oldest row and appends the new one.
template <int W>
KDA_INLINE void ConvStep(const KdaLayerParams& p, const HeadParams& hp, int w, int h,
                         const KdaSequence& seq, const float* raw, const DecodeBuffers& b,
                         float* out) {
  const int kernel = p.conv_kernel_size, hist = kernel - 1;
  const int64_t d = p.head_dim, dp = PadTo16(d), width = int64_t{p.num_heads} * d;
  float* cache = seq.conv + w * hist * width + h * d;  // row j at cache + j·P
  float* window = b.window + w * kernel * dp;
  const float* rows[kKdaMaxConvKernel];
  for (int j = 0; j < kernel; ++j) rows[j] = window + j * dp;
  for (int j = 0; j < hist; ++j) CopyPadded(window + j * dp, cache + j * width, d, dp);
  CopyPadded(window + hist * dp, raw + seq.row_offset * width + h * d, d, dp);
  kda::ConvSilu<W>(rows, hp.conv_t[w], kernel, dp, out);
  for (int j = 0; j < hist; ++j) {
    std::memcpy(cache + j * width, window + (j + 1) * dp, static_cast<size_t>(d) * sizeof(float));
  }
}

template <int W, int kMaxNV>
KDA_INLINE void DecodeOne(const KdaLayerParams& p, const HeadParams& hp, int h,
                          const KdaSequence& seq, const KdaRows& rows, const DecodeBuffers& b,
                          float* y) {
  const int64_t d = p.head_dim, dp = PadTo16(d), width = int64_t{p.num_heads} * d;
  const int64_t at = seq.row_offset * width + h * d;  // this (token, head) in a [rows, P] array
  ConvStep<W>(p, hp, 0, h, seq, rows.q, b, b.q);
  ConvStep<W>(p, hp, 1, h, seq, rows.k, b, b.k);
  ConvStep<W>(p, hp, 2, h, seq, rows.v, b, b.v);
  kda::L2Normalize<W>(b.q, dp, p.l2_norm_eps, 1.0f / std::sqrt(static_cast<float>(d)));
  kda::L2Normalize<W>(b.k, dp, p.l2_norm_eps, 1.0f);
  CopyPadded(b.f, rows.f + at, d, dp);
  kda::LogDecay<W>(b.f, hp, p.has_gate_lower_bound, p.gate_lower_bound, d, dp, b.alpha);
  VF<W> kq{};
  for (int64_t c = 0; c < dp; c += W) {
    const VF<W> alpha = kda::Exp<W>(Load<W>(b.alpha + c));
    Store<W>(b.alpha + c, alpha);
    Store<W>(b.aq + c, alpha * Load<W>(b.q + c));
    Store<W>(b.ak + c, alpha * Load<W>(b.k + c));
    kq = kq + Load<W>(b.k + c) * Load<W>(b.q + c);
  }
  const float beta = kda::Beta(rows.b[seq.row_offset * p.num_heads + h]);
  std::memset(b.o + d, 0,
              static_cast<size_t>(dp - d) * sizeof(float));  // StateUpdate writes [0, d)
  StateUpdate<W, kMaxNV>(seq.state + h * d * d, d, b, beta, kda::ReduceAdd<W>(kq));
  CopyPadded(b.gate, rows.gate + at, d, dp);
  kda::GatedRmsNorm<W>(b.o, b.gate, hp.o_norm, d, dp, p.o_norm_eps, b.y);
  std::memcpy(y + at, b.y, static_cast<size_t>(d) * sizeof(float));
}

// One call's work split into tasks: task t = head t / tasks_per_head, sequences
// [(t % tasks_per_head)·seqs_per_task, +seqs_per_task). A task builds its head's padded
// parameters once and runs its sequences in order.
struct DecodeJob {
  const KdaLayerParams* p;
  const KdaSequence* seqs;
  int64_t num_seqs;
  const KdaRows* rows;
  float* y;
  int64_t seqs_per_task;
  int64_t tasks_per_head;
};

template <int W, int kMaxNV>
KDA_INLINE void DecodeTask(const DecodeJob& job, int64_t task) {
  const KdaLayerParams& p = *job.p;
  const int64_t dp = PadTo16(p.head_dim);
  float* scratch = kda::ThreadScratch<0>(DecodeScratchFloats(p.conv_kernel_size, dp));
  const DecodeBuffers b = CarveBuffers(scratch, p.conv_kernel_size, dp);
  const int h = static_cast<int>(task / job.tasks_per_head);
  const HeadParams hp = kda::PrepareHeadParams(p, h, dp, b.params);
  const int64_t first = (task % job.tasks_per_head) * job.seqs_per_task;
  const int64_t last = std::min(job.num_seqs, first + job.seqs_per_task);
  for (int64_t s = first; s < last; ++s)
    DecodeOne<W, kMaxNV>(p, hp, h, job.seqs[s], *job.rows, b, job.y);
}

STRATA_TARGET_AVX512 void DecodeTaskAvx512(const DecodeJob& job, int64_t task) {
  DecodeTask<16, 8>(job, task);
}

void DecodeTaskAvx2(const DecodeJob& job, int64_t task) { DecodeTask<8, 4>(job, task); }

}  // namespace

void KdaDecode(const KdaLayerParams& p, const KdaSequence* seqs, int64_t num_seqs,
               const KdaRows& rows, float* y) {
  CHECK_GT(p.num_heads, 0);
  CHECK(p.head_dim > 0 && p.head_dim <= kKdaMaxHeadDim) << "head_dim " << p.head_dim;
  CHECK(p.conv_kernel_size >= 1 && p.conv_kernel_size <= kKdaMaxConvKernel);
  CHECK(!p.has_gate_lower_bound || p.gate_lower_bound < 0.0f);
  for (int64_t s = 0; s < num_seqs; ++s) {
    CHECK_EQ(seqs[s].num_tokens, 1);
    CHECK(seqs[s].update_caches) << "KdaDecode updates the caches in place";
  }
  if (num_seqs == 0) return;
  // About 4 tasks per thread: whole heads when there are enough, else heads × sequence blocks.
  const int64_t heads = p.num_heads;
  const int64_t blocks = std::clamp<int64_t>((4 * MaxThreads() + heads - 1) / heads, 1, num_seqs);
  const int64_t seqs_per_task = (num_seqs + blocks - 1) / blocks;
  const int64_t tasks_per_head = (num_seqs + seqs_per_task - 1) / seqs_per_task;
  const DecodeJob job{&p, seqs, num_seqs, &rows, y, seqs_per_task, tasks_per_head};
  const Isa isa = ActiveIsa();
  const auto task_fn =
      isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16 ? DecodeTaskAvx512 : DecodeTaskAvx2;
  const int64_t work = num_seqs * heads * p.head_dim * p.head_dim;  // state elements
  ParallelFor(heads * tasks_per_head, work >= kParallelMinStateElements,
              [&](int64_t task) { task_fn(job, task); });
}

}  // namespace strata::kernels::cpu
