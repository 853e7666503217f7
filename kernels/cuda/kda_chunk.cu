// KdaPrefillChunked: one CTA (8 warps) per (sequence, head) walks the sequence in chunks of 16.
// Per chunk, between barriers:
//   0  wait for this chunk's inputs (cp.async), prefetch the next chunk's into the other buffer
//   1  conv + SiLU (q|k|v rows), gate g, β; the next chunk's conv history
//   2  q/k L2 norms (warp per row); cumulative G per channel, e^{G_last}
//   3  bf16 operands Kp, Qp, Kf, Qf, Kn, Kend (f32 math, one bf16 rounding each)
//   4  tensor cores: L = Kf·Knᵀ, A = Qf·Knᵀ (warps 0, 1); X = Kp·S, P = Qp·S (16 columns/warp)
//   5  U = (I + Diag(β)L)⁻¹ Diag(β)(V − X), forward substitution in f32 (thread per column)
//   6  O = P + A·U (f32); S = Diag(e^{G_last}) S + Kendᵀ·U (tensor cores, S in registers in the
//      m16n8 accumulator layout: warp w owns rows 16w..16w+15), S → bf16 copy for the next chunk
//   7  y = RMSNorm(O)·w ⊙ σ(g_raw) (warp per row)
#include "kernels/cuda/kda_chunk.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/launch.cuh"
#include "kernels/cuda/internal/mma.cuh"

namespace strata::kernels::cuda {
namespace {

using internal::Bf16BitsToFloat;
using internal::CpAsync16;
using internal::CpAsync4;
using internal::CpAsyncCommit;
using internal::CpAsyncWait;
using internal::FloatToBf16Bits;
using internal::LdMatrixX4;
using internal::LdMatrixX4Trans;
using internal::MmaBf16;
using internal::SigmoidF;
using internal::SiluF;
using internal::StoreOut;
using internal::WarpSum;

constexpr int kD = kKdaHeadDim;       // 128
constexpr int kC = kKdaPrefillChunk;  // 16
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kCh = 3 * kD;  // conv channels of one head: q | k | v
constexpr int kMaxHist = 3;  // conv_size − 1
constexpr int kWinRows = kMaxHist + kC;
constexpr int kLd = kD + 8;   // bf16 tile row stride (272 B): the 8 rows of an ldmatrix hit
                              // distinct bank groups
constexpr int kLdf = kD + 4;  // f32 row stride of q/k (written in the mma accumulator layout)

static_assert(kThreads % kD == 0 && kD == 128 && kC == 16, "index maps below assume these");

struct Shared {
  // Conv window per buffer: rows 0..hist−1 = the previous hist pre-conv inputs (oldest first),
  // row hist + r = token r of the chunk (zero-filled past the sequence end).
  alignas(16) float win[2][kWinRows][kCh];
  alignas(16) float fin[2][kC][kD];  // gate input f
  alignas(16) float gin[2][kC][kD];  // output-gate logits g_raw
  alignas(16) float braw[2][kC];     // β logits
  alignas(16) float conv_w[4][kCh];  // conv_w[j][task]
  alignas(16) float q[kC][kLdf];     // q rows; P = Qp·S from stage 4; O from stage 6
  alignas(16) float k[kC][kLdf];     // k rows; X = Kp·S from stage 4; U from stage 5
  alignas(16) float v[kC][kD];
  alignas(16) float gcum[kC][kD];  // g, then G (cumulative within the chunk)
  alignas(16) float lmat[kC][kC];  // strictly lower, without β
  alignas(16) float amat[kC][kC];  // lower incl. diagonal
  alignas(16) float beta[kC];      // 0 past the sequence end
  alignas(16) float glast[kD];
  alignas(16) float decay_last[kD];
  alignas(16) uint16_t kf[kC][kLd];
  alignas(16) uint16_t qf[kC][kLd];
  alignas(16) uint16_t kn[kC][kLd];
  alignas(16) uint16_t kp[kC][kLd];
  alignas(16) uint16_t qp[kC][kLd];
  alignas(16) uint16_t kend[kC][kLd];
  alignas(16) uint16_t u[kC][kLd];
  alignas(16) uint16_t s[kD][kLd];  // bf16 copy of the chunk-start state S[i][j]
};
constexpr size_t kSmemBytes = sizeof(Shared);
static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM on Hopper");

struct ChunkArgs {
  KdaDecodeInputs in;
  const int32_t* cu_seqlens;
  int num_heads;
  int conv_size;
  float lower_bound;
  float norm_eps;
  float l2_eps;
  bool update_caches;
};

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  return FloatToBf16Bits(lo) | (static_cast<uint32_t>(FloatToBf16Bits(hi)) << 16);
}

// Two consecutive state elements ↔ f32.
__device__ __forceinline__ void LoadPair(const float* src, float& a, float& b) {
  const float2 x = *reinterpret_cast<const float2*>(src);
  a = x.x;
  b = x.y;
}
__device__ __forceinline__ void LoadPair(const uint16_t* src, float& a, float& b) {
  const uint32_t x = *reinterpret_cast<const uint32_t*>(src);
  a = Bf16BitsToFloat(x & 0xffffu);
  b = Bf16BitsToFloat(x >> 16);
}
__device__ __forceinline__ void StorePair(float* dst, float a, float b) {
  *reinterpret_cast<float2*>(dst) = make_float2(a, b);
}
__device__ __forceinline__ void StorePair(uint16_t* dst, float a, float b) {
  *reinterpret_cast<uint32_t*>(dst) = PackBf16(a, b);
}

// Conv task `task` of head h: channel index in the [q | k | v] concatenation.
__device__ __forceinline__ int64_t ConvChannel(int task, int h, int64_t hd) {
  return static_cast<int64_t>(task / kD) * hd + h * kD + task % kD;
}

// Stage 0: cp.async of the n ≤ 16 token rows starting at t0 into buffer `buf` (one group).
__device__ __forceinline__ void IssueChunkLoads(const ChunkArgs& a, int h, int64_t t0, int n,
                                                int hist, int buf, Shared& sh) {
  const int tid = threadIdx.x;
  const int64_t hd = static_cast<int64_t>(a.num_heads) * kD;
  const int64_t qkv_ld = a.in.qkv_stride > 0 ? a.in.qkv_stride : 3 * hd;
  const int64_t g_ld = a.in.g_stride > 0 ? a.in.g_stride : hd;
  const int64_t b_ld = a.in.b_stride > 0 ? a.in.b_stride : a.num_heads;
  constexpr int kPieces = kD / 4;  // 16-byte pieces per 128-float row
  for (int i = tid; i < kC * 3 * kPieces; i += kThreads) {
    const int r = i / (3 * kPieces), rem = i % (3 * kPieces);
    const int w = rem / kPieces, c4 = (rem % kPieces) * 4;
    const bool valid = r < n;
    const int64_t at = valid ? (t0 + r) * qkv_ld + w * hd + h * kD + c4 : 0;
    CpAsync16(&sh.win[buf][hist + r][w * kD + c4], a.in.qkv_raw + at, valid);
  }
  for (int i = tid; i < kC * kPieces; i += kThreads) {
    const int r = i / kPieces, c4 = (i % kPieces) * 4;
    const bool valid = r < n;
    const int64_t col = h * kD + c4;
    CpAsync16(&sh.fin[buf][r][c4], a.in.f + (valid ? (t0 + r) * hd + col : 0), valid);
    CpAsync16(&sh.gin[buf][r][c4], a.in.g_raw + (valid ? (t0 + r) * g_ld + col : 0), valid);
  }
  if (tid < kC) {
    const bool valid = tid < n;
    const int64_t at = valid ? (t0 + tid) * b_ld + h : 0;
    CpAsync4(&sh.braw[buf][tid], a.in.b_raw + at, valid ? 4 : 0);
  }
  CpAsyncCommit();
}

// Stage 1: conv + SiLU into q/k/v rows (0 past n), g = lb·σ(e^{A_log}(f + dt_bias)) (0 past n),
// β = σ(b); the window rows n..n+hist−1 become the other buffer's history. Conv task = (channel,
// half of the chunk): 8 outputs from 8 + hist window values held in registers.
__device__ __forceinline__ void ConvAndGate(const ChunkArgs& a, int n, int hist, int cur,
                                            float a_exp, float dt_bias_c, Shared& sh) {
  const int tid = threadIdx.x, conv_size = hist + 1;
  constexpr int kHalf = kC / 2;
  for (int t = tid; t < 2 * kCh; t += kThreads) {
    const int task = t % kCh, r0 = (t / kCh) * kHalf;
    float w[kMaxHist + 1], x[kHalf + kMaxHist];
#pragma unroll
    for (int j = 0; j <= kMaxHist; ++j) w[j] = j < conv_size ? sh.conv_w[j][task] : 0.0f;
#pragma unroll
    for (int i = 0; i < kHalf + kMaxHist; ++i) {  // window rows r0 .. r0 + 7 + hist
      x[i] = i < kHalf + hist ? sh.win[cur][r0 + i][task] : 0.0f;
    }
    float* dst = task < kD ? &sh.q[r0][task] : task < 2 * kD ? &sh.k[r0][task - kD] : nullptr;
#pragma unroll
    for (int rr = 0; rr < kHalf; ++rr) {
      float acc = 0.0f;  // same order as the recurrent kernel: oldest input first
#pragma unroll
      for (int j = 0; j <= kMaxHist; ++j) {
        if (j < conv_size) acc += w[j] * x[rr + j];
      }
      const float value = r0 + rr < n ? SiluF(acc) : 0.0f;
      if (dst != nullptr) {
        dst[rr * kLdf] = value;
      } else {
        sh.v[r0 + rr][task - 2 * kD] = value;
      }
    }
  }
  for (int i = tid; i < kC * kD; i += kThreads) {
    const int r = i / kD, c = i % kD;  // c == tid % kD
    sh.gcum[r][c] =
        r < n ? a.lower_bound * SigmoidF(a_exp * (sh.fin[cur][r][c] + dt_bias_c)) : 0.0f;
  }
  if (tid < kC) sh.beta[tid] = tid < n ? SigmoidF(sh.braw[cur][tid]) : 0.0f;
  for (int i = tid; i < hist * kCh; i += kThreads) {
    const int j = i / kCh, task = i % kCh;
    sh.win[cur ^ 1][j][task] = sh.win[cur][n + j][task];
  }
}

// Stage 2: q ← q·D^-1/2/sqrt(Σq² + ε), k ← k/sqrt(Σk² + ε) (zero rows stay zero); G = cumsum g.
__device__ __forceinline__ void NormAndCumsum(float l2_eps, Shared& sh) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  for (int m = warp; m < 2 * kC; m += kWarps) {
    float* row = m < kC ? sh.q[m] : sh.k[m - kC];
    float4 x = *reinterpret_cast<float4*>(row + 4 * lane);
    const float ss = WarpSum(x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w);
    const float scale =
        m < kC ? rsqrtf(static_cast<float>(kD)) / sqrtf(ss + l2_eps) : 1.0f / sqrtf(ss + l2_eps);
    x.x *= scale;
    x.y *= scale;
    x.z *= scale;
    x.w *= scale;
    *reinterpret_cast<float4*>(row + 4 * lane) = x;
  }
  if (tid < kD) {
    float run = 0.0f;  // g = 0 past n, so the final sum is G_last
#pragma unroll
    for (int r = 0; r < kC; ++r) {
      run += sh.gcum[r][tid];
      sh.gcum[r][tid] = run;
    }
    sh.glast[tid] = run;
    sh.decay_last[tid] = expf(run);
  }
}

// Stage 3: bf16 operands. ref = G_last/2 keeps e^{G−ref} and e^{ref−G} within e^±(|lb|·8).
__device__ __forceinline__ void DecayOperands(Shared& sh) {
  for (int p = threadIdx.x; p < kC * kD / 2; p += kThreads) {
    const int r = p / (kD / 2), c = (p % (kD / 2)) * 2;
    float kp[2], qp[2], kf[2], qf[2], kn[2], ke[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float g = sh.gcum[r][c + e], gl = sh.glast[c + e], ref = 0.5f * gl;
      const float kv = sh.k[r][c + e], qv = sh.q[r][c + e];
      // ex2.approx (~2 ulp, |argument| ≤ 60): far below the bf16 rounding that follows.
      const float e_g = __expf(g), e_fwd = __expf(g - ref), e_bwd = __expf(ref - g),
                  e_end = __expf(gl - g);
      kp[e] = kv * e_g;
      qp[e] = qv * e_g;
      kf[e] = kv * e_fwd;
      qf[e] = qv * e_fwd;
      kn[e] = kv * e_bwd;
      ke[e] = kv * e_end;
    }
    *reinterpret_cast<uint32_t*>(&sh.kp[r][c]) = PackBf16(kp[0], kp[1]);
    *reinterpret_cast<uint32_t*>(&sh.qp[r][c]) = PackBf16(qp[0], qp[1]);
    *reinterpret_cast<uint32_t*>(&sh.kf[r][c]) = PackBf16(kf[0], kf[1]);
    *reinterpret_cast<uint32_t*>(&sh.qf[r][c]) = PackBf16(qf[0], qf[1]);
    *reinterpret_cast<uint32_t*>(&sh.kn[r][c]) = PackBf16(kn[0], kn[1]);
    *reinterpret_cast<uint32_t*>(&sh.kend[r][c]) = PackBf16(ke[0], ke[1]);
  }
}

// Stage 4 (tensor cores). ldmatrix lane maps (lane l supplies a row of matrix l/8):
//   A, row-major [m][k] tile:           row l & 15,                      col (l >> 4)·8
//   B = Nᵀ from N[n][k] (non-trans):     row (l & 7) + (l >> 4)·8,        col ((l >> 3) & 1)·8
//   B from M[k][n] (trans):              row (l & 7) + ((l >> 3) & 1)·8,  col (l >> 4)·8
// giving regs {b0, b1} of n-tile 0 and {b2, b3} of n-tile 1 for both B forms.
__device__ __forceinline__ void ChunkProducts(Shared& sh) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c2 = (lane & 3) * 2;
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;
  if (warp < 2) {  // L (warp 0) or A (warp 1): [16 × 16] over the 128 key channels
    const uint16_t(*op)[kLd] = warp == 0 ? sh.kf : sh.qf;
    const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t af[4], bf[4];
      LdMatrixX4(af, &op[a_row][kk * 16 + a_col]);
      LdMatrixX4(bf, &sh.kn[b_row][kk * 16 + b_col]);
      MmaBf16(acc[0], af, bf[0], bf[1]);
      MmaBf16(acc[1], af, bf[2], bf[3]);
    }
    float(*dst)[kC] = warp == 0 ? sh.lmat : sh.amat;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = g + (e >> 1) * 8, s = nt * 8 + c2 + (e & 1);
        const bool keep = warp == 0 ? r > s : r >= s;  // select: masked entries may be inf
        dst[r][s] = keep ? acc[nt][e] : 0.0f;
      }
    }
  }
  // X = Kp·S and P = Qp·S on columns 16·warp .. +16 (k = the 128 key channels).
  const int t_row = (lane & 7) + ((lane >> 3) & 1) * 8, t_col = 16 * warp + (lane >> 4) * 8;
  float x[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  float p[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    uint32_t ak[4], aq[4], bs[4];
    LdMatrixX4(ak, &sh.kp[a_row][kk * 16 + a_col]);
    LdMatrixX4(aq, &sh.qp[a_row][kk * 16 + a_col]);
    LdMatrixX4Trans(bs, &sh.s[kk * 16 + t_row][t_col]);
    MmaBf16(x[0], ak, bs[0], bs[1]);
    MmaBf16(x[1], ak, bs[2], bs[3]);
    MmaBf16(p[0], aq, bs[0], bs[1]);
    MmaBf16(p[1], aq, bs[2], bs[3]);
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = g + (e >> 1) * 8, col = 16 * warp + nt * 8 + c2 + (e & 1);
      sh.k[r][col] = x[nt][e];
      sh.q[r][col] = p[nt][e];
    }
  }
}

// Stage 5: U_r = β_r (v_r − X_r − Σ_{s<r} L_rs U_s), thread j < 128 owns column j (f32).
__device__ __forceinline__ void SolvePseudoValues(Shared& sh) {
  const int j = threadIdx.x;
  if (j >= kD) return;
  float u[kC];
#pragma unroll
  for (int r = 0; r < kC; ++r) {
    float acc = sh.v[r][j] - sh.k[r][j];
#pragma unroll
    for (int s = 0; s < r; ++s) acc -= sh.lmat[r][s] * u[s];
    u[r] = sh.beta[r] * acc;  // β = 0 (and v = X = 0) past the sequence end
    sh.k[r][j] = u[r];
    sh.u[r][j] = FloatToBf16Bits(u[r]);
  }
}

// Stage 6: O = P + A·U in f32 (thread: column tid % 128, 8 rows); S ← Diag(e^{G_last}) S +
// Kendᵀ·U on tensor cores for the warp's 16 rows; then the bf16 copy of the new S.
__device__ __forceinline__ void OutputAndState(float (&st)[kD / 8][4], Shared& sh) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  {
    const int j = tid % kD, r0 = (tid / kD) * (kC / 2);
    float u[kC];
#pragma unroll
    for (int s = 0; s < kC; ++s) u[s] = sh.k[s][j];
#pragma unroll
    for (int rr = 0; rr < kC / 2; ++rr) {
      const int r = r0 + rr;
      float o = sh.q[r][j];
#pragma unroll
      for (int s4 = 0; s4 < kC; s4 += 4) {  // A is 0 above the diagonal
        const float4 a4 = *reinterpret_cast<const float4*>(&sh.amat[r][s4]);
        o += a4.x * u[s4] + a4.y * u[s4 + 1] + a4.z * u[s4 + 2] + a4.w * u[s4 + 3];
      }
      sh.q[r][j] = o;
    }
  }
  const int g = lane >> 2, c2 = (lane & 3) * 2, i0 = 16 * warp;
  // A = Kendᵀ rows i0..i0+15 (k = token r): trans loads of Kend[r][i]; matrix l/8 covers
  // (i half (l/8) & 1, r half (l/8) >> 1).
  uint32_t ak[4];
  LdMatrixX4Trans(ak, &sh.kend[(lane >> 4) * 8 + (lane & 7)][i0 + ((lane >> 3) & 1) * 8]);
  const float d_lo = sh.decay_last[i0 + g], d_hi = sh.decay_last[i0 + g + 8];
  const int t_row = (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int jp = 0; jp < kD / 16; ++jp) {
    uint32_t bu[4];
    LdMatrixX4Trans(bu, &sh.u[t_row][16 * jp + (lane >> 4) * 8]);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float(&acc)[4] = st[2 * jp + half];
      acc[0] *= d_lo;
      acc[1] *= d_lo;
      acc[2] *= d_hi;
      acc[3] *= d_hi;
      MmaBf16(acc, ak, bu[2 * half], bu[2 * half + 1]);
    }
  }
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    const int col = nt * 8 + c2;
    *reinterpret_cast<uint32_t*>(&sh.s[i0 + g][col]) = PackBf16(st[nt][0], st[nt][1]);
    *reinterpret_cast<uint32_t*>(&sh.s[i0 + g + 8][col]) = PackBf16(st[nt][2], st[nt][3]);
  }
}

// Stage 7: y rows t0 .. t0+n−1 of head h; warp per row, lane owns channels 4·lane .. +4.
template <typename OutT>
__device__ __forceinline__ void GatedNormOut(const float (&w)[4], int64_t t0, int n, int h,
                                             int64_t hd, float norm_eps, int cur, const Shared& sh,
                                             OutT* y) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int r = warp; r < n; r += kWarps) {
    const float4 o4 = *reinterpret_cast<const float4*>(&sh.q[r][4 * lane]);
    const float o[4] = {o4.x, o4.y, o4.z, o4.w};
    const float ss = WarpSum(o[0] * o[0] + o[1] * o[1] + o[2] * o[2] + o[3] * o[3]);
    const float inv = 1.0f / sqrtf(ss / kD + norm_eps);
    OutT* dst = y + (t0 + r) * hd + h * kD + 4 * lane;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      StoreOut(dst + e, o[e] * inv * w[e] * SigmoidF(sh.gin[cur][r][4 * lane + e]));
    }
  }
}

// Conv weights and history into shared memory, S into registers (accumulator layout) and its
// bf16 copy into sh.s. Published by the first chunk's barrier (or the final one).
template <typename StateT>
__device__ __forceinline__ void LoadHeadState(const ChunkArgs& a, int h, const StateT* s_ptr,
                                              const float* conv_row, float (&st)[kD / 8][4],
                                              Shared& sh) {
  const int tid = threadIdx.x, hist = a.conv_size - 1;
  const int64_t hd = static_cast<int64_t>(a.num_heads) * kD;
  for (int task = tid; task < kCh; task += kThreads) {
    const int64_t ch = ConvChannel(task, h, hd);
    for (int j = 0; j < a.conv_size; ++j) sh.conv_w[j][task] = a.in.conv_w[ch * a.conv_size + j];
    for (int j = 0; j < hist; ++j) sh.win[0][j][task] = conv_row[j * 3 * hd + ch];
  }
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, c2 = (lane & 3) * 2;
  const int i0 = 16 * warp + g;
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    LoadPair(s_ptr + i0 * kD + nt * 8 + c2, st[nt][0], st[nt][1]);
    LoadPair(s_ptr + (i0 + 8) * kD + nt * 8 + c2, st[nt][2], st[nt][3]);
  }
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    *reinterpret_cast<uint32_t*>(&sh.s[i0][nt * 8 + c2]) = PackBf16(st[nt][0], st[nt][1]);
    *reinterpret_cast<uint32_t*>(&sh.s[i0 + 8][nt * 8 + c2]) = PackBf16(st[nt][2], st[nt][3]);
  }
}

// Tokens of the chunk starting at t0 (1..16).
__device__ __forceinline__ int ChunkRows(int64_t t0, int64_t t_end) {
  return t_end - t0 < kC ? static_cast<int>(t_end - t0) : kC;
}

// Grid (H, sequences), 256 threads, kSmemBytes dynamic shared memory.
template <typename StateT, typename OutT>
__global__ void __launch_bounds__(kThreads, 1)
    KdaChunkKernel(ChunkArgs a, StateT* __restrict__ state, float* __restrict__ conv_state,
                   OutT* __restrict__ y) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  STRATA_DYNAMIC_SHARED(smem_raw);
  Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
  const int64_t hd = static_cast<int64_t>(a.num_heads) * kD;
  const int64_t t_begin = a.cu_seqlens[b];
  const int64_t t_end = a.in.seq_ends != nullptr ? a.in.seq_ends[b] : a.cu_seqlens[b + 1];
  const int slot = a.in.slots[b];
  if (slot < 0) {  // padding: outputs 0, no state touched
    for (int64_t t = t_begin; t < t_end; ++t) {
      if (tid < kD) StoreOut(y + t * hd + h * kD + tid, 0.0f);
    }
    return;
  }
  const int hist = a.conv_size - 1;
  if (t_begin < t_end) {
    IssueChunkLoads(a, h, t_begin, ChunkRows(t_begin, t_end), hist, 0, sh);
  }
  StateT* s_ptr = state + (static_cast<int64_t>(slot) * a.num_heads + h) * kD * kD;
  float* conv_row = conv_state + static_cast<int64_t>(slot) * hist * 3 * hd;
  float st[kD / 8][4];
  LoadHeadState(a, h, s_ptr, conv_row, st, sh);
  const float a_exp = expf(a.in.a_log[h]);
  const float dt_bias_c = a.in.dt_bias[h * kD + tid % kD];
  const float w[4] = {a.in.o_norm_w[4 * lane], a.in.o_norm_w[4 * lane + 1],
                      a.in.o_norm_w[4 * lane + 2], a.in.o_norm_w[4 * lane + 3]};
  int cur = 0;
  for (int64_t t0 = t_begin; t0 < t_end; t0 += kC, cur ^= 1) {
    const int n = ChunkRows(t0, t_end);
    CpAsyncWait<0>();
    __syncthreads();  // this chunk's inputs landed; the previous chunk is done with everything
    if (t0 + kC < t_end) {
      IssueChunkLoads(a, h, t0 + kC, ChunkRows(t0 + kC, t_end), hist, cur ^ 1, sh);
    }
    ConvAndGate(a, n, hist, cur, a_exp, dt_bias_c, sh);
    __syncthreads();
    NormAndCumsum(a.l2_eps, sh);
    __syncthreads();
    DecayOperands(sh);
    __syncthreads();
    ChunkProducts(sh);
    __syncthreads();
    SolvePseudoValues(sh);
    __syncthreads();
    OutputAndState(st, sh);
    __syncthreads();
    GatedNormOut(w, t0, n, h, hd, a.norm_eps, cur, sh, y);
  }
  if (!a.update_caches) return;
  {
    const int warp = tid >> 5, g = lane >> 2, c2 = (lane & 3) * 2, i0 = 16 * warp + g;
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt) {
      StorePair(s_ptr + i0 * kD + nt * 8 + c2, st[nt][0], st[nt][1]);
      StorePair(s_ptr + (i0 + 8) * kD + nt * 8 + c2, st[nt][2], st[nt][3]);
    }
  }
  __syncthreads();  // the last history rows were written by other threads
  for (int task = tid; task < kCh; task += kThreads) {
    const int64_t ch = ConvChannel(task, h, hd);
    for (int j = 0; j < hist; ++j) conv_row[j * 3 * hd + ch] = sh.win[cur][j][task];
  }
}

bool Misaligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes != 0;
}

absl::Status CheckArgs(const KdaDecodeInputs& in, const int32_t* cu_seqlens, const void* state,
                       const float* conv_state, const KdaDecodeParams& p, const void* y) {
  if (!p.has_lower_bound || !(p.lower_bound >= kKdaChunkedMinLowerBound) ||
      !(p.lower_bound < 0.0f)) {
    return absl::InvalidArgumentError(
        "KdaPrefillChunked: needs the bounded (K3) gate with -7.5 <= lower_bound < 0 (each "
        "factor e^(±G) of a 16-token chunk must stay within e^±60); use KdaPrefillRecurrent");
  }
  if (p.head_dim != kD) {
    return absl::InvalidArgumentError("KdaPrefillChunked: head_dim must be 128");
  }
  if (p.conv_size < 1 || p.conv_size > kMaxHist + 1) {
    return absl::InvalidArgumentError("KdaPrefillChunked: conv_size must be in 1..4");
  }
  if (p.num_heads <= 0 || p.num_heads > 65535 || p.batch < 0 || p.batch > 65535) {
    return absl::InvalidArgumentError(
        "KdaPrefillChunked: need 1 <= num_heads <= 65535, 0 <= batch <= 65535");
  }
  if (p.batch == 0) return absl::OkStatus();
  if (cu_seqlens == nullptr || in.qkv_raw == nullptr || in.f == nullptr || in.b_raw == nullptr ||
      in.g_raw == nullptr || in.conv_w == nullptr || in.a_log == nullptr || in.dt_bias == nullptr ||
      in.o_norm_w == nullptr || in.slots == nullptr || state == nullptr || y == nullptr ||
      (p.conv_size > 1 && conv_state == nullptr)) {
    return absl::InvalidArgumentError("KdaPrefillChunked: null pointer argument");
  }
  if (Misaligned(in.qkv_raw, 16) || Misaligned(in.f, 16) || Misaligned(in.g_raw, 16) ||
      Misaligned(state, 8)) {
    return absl::InvalidArgumentError(
        "KdaPrefillChunked: qkv_raw, f, g_raw need 16-byte alignment, state 8-byte");
  }
  if (in.qkv_stride % 4 != 0 || in.g_stride % 4 != 0 || in.qkv_stride < 0 || in.g_stride < 0 ||
      in.b_stride < 0) {
    return absl::InvalidArgumentError(
        "KdaPrefillChunked: qkv_stride and g_stride must be multiples of 4 floats (16-byte rows), "
        "strides >= 0");
  }
  return absl::OkStatus();
}

template <typename StateT, typename OutT>
absl::Status Launch(const KdaDecodeInputs& in, const int32_t* cu_seqlens, StateT* state,
                    float* conv_state, const KdaDecodeParams& p, OutT* y, cudaStream_t stream) {
  const absl::Status args_ok = CheckArgs(in, cu_seqlens, state, conv_state, p, y);
  if (!args_ok.ok() || p.batch == 0) return args_ok;
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(KdaChunkKernel<StateT, OutT>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
      "KdaPrefillChunked cudaFuncSetAttribute");
  const ChunkArgs args{in,         cu_seqlens, p.num_heads,    p.conv_size, p.lower_bound,
                       p.norm_eps, p.l2_eps,   p.update_caches};
  internal::LaunchKernel(KdaChunkKernel<StateT, OutT>, dim3(p.num_heads, p.batch), kThreads,
                         kSmemBytes, stream, args, state, conv_state, y);
  return LaunchStatus("KdaChunkKernel launch");
}

}  // namespace

absl::Status KdaPrefillChunked(const KdaDecodeInputs& in, const int32_t* cu_seqlens, float* state,
                               float* conv_state, const KdaDecodeParams& params, float* y,
                               cudaStream_t stream) {
  return Launch(in, cu_seqlens, state, conv_state, params, y, stream);
}
absl::Status KdaPrefillChunked(const KdaDecodeInputs& in, const int32_t* cu_seqlens, float* state,
                               float* conv_state, const KdaDecodeParams& params, uint16_t* y,
                               cudaStream_t stream) {
  return Launch(in, cu_seqlens, state, conv_state, params, y, stream);
}
absl::Status KdaPrefillChunkedBf16State(const KdaDecodeInputs& in, const int32_t* cu_seqlens,
                                        uint16_t* state, float* conv_state,
                                        const KdaDecodeParams& params, float* y,
                                        cudaStream_t stream) {
  return Launch(in, cu_seqlens, state, conv_state, params, y, stream);
}
absl::Status KdaPrefillChunkedBf16State(const KdaDecodeInputs& in, const int32_t* cu_seqlens,
                                        uint16_t* state, float* conv_state,
                                        const KdaDecodeParams& params, uint16_t* y,
                                        cudaStream_t stream) {
  return Launch(in, cu_seqlens, state, conv_state, params, y, stream);
}

}  // namespace strata::kernels::cuda
