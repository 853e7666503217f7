#include "kernels/cuda/kda_decode.h"

#include <algorithm>
#include <climits>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/device_math.cuh"
#include "kernels/cuda/internal/launch.cuh"
#include "kernels/cuda/internal/mma.cuh"

namespace strata::kernels::cuda {
namespace {

using internal::Bf16BitsToFloat;
using internal::BlockSum;
using internal::FloatToBf16Bits;
using internal::SigmoidF;
using internal::SiluF;
using internal::SoftplusF;
using internal::StoreOut;

constexpr int kD = kKdaHeadDim;
constexpr int kThreads = 256;
constexpr int kRowGroups = kThreads / 32;        // warps; warp w owns state rows w·16 .. +16
constexpr int kRowsPerThread = kD / kRowGroups;  // 16; lane owns value columns 4·lane .. +4
constexpr int kCtasPerSm = 2;                    // __launch_bounds__ and the persistent grid

// The state staging buffer of one CTA: [kRowsPerThread][kThreads][4] elements, thread t's r-th
// four at (r · kThreads + t) · 4 — each thread reads back only what it copied (no barrier), and
// a warp's reads of one r are contiguous (no bank conflicts).
template <typename StateT>
constexpr int StageBytes() {
  return kRowsPerThread * kThreads * 4 * static_cast<int>(sizeof(StateT));
}

// Issues thread tid's cp.async copies of its 16 × 4 elements of the state at s_ptr.
__device__ __forceinline__ void StageState(const float* s_ptr, float* stage, int tid, int row0,
                                           int col) {
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    internal::CpAsync16(stage + (r * kThreads + tid) * 4, s_ptr + (row0 + r) * kD + col, true);
  }
}
__device__ __forceinline__ void StageState(const uint16_t* s_ptr, uint16_t* stage, int tid,
                                           int row0, int col) {
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    internal::CpAsync8(stage + (r * kThreads + tid) * 4, s_ptr + (row0 + r) * kD + col);
  }
}

// Four consecutive state elements ↔ f32.
__device__ __forceinline__ void Load4(const float* src, float (&v)[4]) {
  const float4 x = *reinterpret_cast<const float4*>(src);
  v[0] = x.x;
  v[1] = x.y;
  v[2] = x.z;
  v[3] = x.w;
}
__device__ __forceinline__ void Load4(const uint16_t* src, float (&v)[4]) {
  const uint2 x = *reinterpret_cast<const uint2*>(src);
  v[0] = Bf16BitsToFloat(x.x & 0xffffu);
  v[1] = Bf16BitsToFloat(x.x >> 16);
  v[2] = Bf16BitsToFloat(x.y & 0xffffu);
  v[3] = Bf16BitsToFloat(x.y >> 16);
}
__device__ __forceinline__ void Store4(float* dst, const float (&v)[4]) {
  *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void Store4(uint16_t* dst, const float (&v)[4]) {
  uint2 x;
  x.x = FloatToBf16Bits(v[0]) | (static_cast<uint32_t>(FloatToBf16Bits(v[1])) << 16);
  x.y = FloatToBf16Bits(v[2]) | (static_cast<uint32_t>(FloatToBf16Bits(v[3])) << 16);
  *reinterpret_cast<uint2*>(dst) = x;
}

struct Shared {
  float q[kD], k[kD], v[kD], alpha[kD], e[kD], o[kD];
  float part_a[kRowGroups][kD];  // Σ_i α_i k_i S_ij over each warp's rows
  float part_b[kRowGroups][kD];  // Σ_i α_i q_i S_ij
  float hist[3][3 * kD];         // conv history of this head's q|k|v channels, oldest first
  float red[32];
};

// Conv task `task` of head h: channel index in the [q | k | v] concatenation.
__device__ __forceinline__ int64_t ConvChannel(int task, int h, int hd) {
  return static_cast<int64_t>(task / kD) * hd + h * kD + task % kD;
}

// Token t: conv (+ history shift) and SiLU for the 3·D channels of head h; gate α = e^g for its
// D channels. Thread `tid` owns conv tasks tid and tid + 256 (its history entries too).
__device__ __forceinline__ void ConvAndGate(const KdaDecodeInputs& in, int64_t t, int h,
                                            int num_heads, int conv_size, bool has_lower_bound,
                                            float lower_bound, Shared& sh) {
  const int hd = num_heads * kD;
  const int64_t qkv_ld = in.qkv_stride > 0 ? in.qkv_stride : 3 * static_cast<int64_t>(hd);
  for (int task = threadIdx.x; task < 3 * kD; task += kThreads) {
    const int64_t ch = ConvChannel(task, h, hd);
    const float x = in.qkv_raw[t * qkv_ld + ch];
    const float* w = in.conv_w + ch * conv_size;
    float acc = 0.0f;
    for (int j = 0; j < conv_size - 1; ++j) acc += w[j] * sh.hist[j][task];
    acc += w[conv_size - 1] * x;
    for (int j = 0; j + 1 < conv_size - 1; ++j) sh.hist[j][task] = sh.hist[j + 1][task];
    if (conv_size > 1) sh.hist[conv_size - 2][task] = x;
    const float value = SiluF(acc);
    const int lane_ch = task % kD;
    if (task < kD) {
      sh.q[lane_ch] = value;
    } else if (task < 2 * kD) {
      sh.k[lane_ch] = value;
    } else {
      sh.v[lane_ch] = value;
    }
  }
  if (threadIdx.x < kD) {
    const int c = h * kD + threadIdx.x;
    const float a = expf(in.a_log[h]);
    const float x = in.f[t * hd + c] + in.dt_bias[c];
    const float g = has_lower_bound ? lower_bound * SigmoidF(a * x) : -a * SoftplusF(x);
    sh.alpha[threadIdx.x] = expf(g);
  }
}

// One token of the recurrence on the register-resident state s (rows row0..+16, cols col..+4):
// L2 norms, S' = diag(α)S, e = v − S'ᵀk, S = S' + β k eᵀ, o = Sᵀq, y = RMSNorm(o)·w ⊙ σ(g).
// Starts after a barrier that published sh.q/k/v/alpha; ends with a barrier (BlockSum).
template <typename OutT>
__device__ __forceinline__ void RecurrentToken(const KdaDecodeInputs& in, int64_t t, int h,
                                               int num_heads, float norm_eps, float l2_eps,
                                               float (&s)[kRowsPerThread][4], Shared& sh, OutT* y) {
  const int tid = threadIdx.x;
  const int hd = num_heads * kD;
  const int col = 4 * (tid & 31), row0 = (tid >> 5) * kRowsPerThread;
  // q ← q·D^-1/2 / sqrt(Σq² + ε), k ← k / sqrt(Σk² + ε); kq = k·q.
  float qv = tid < kD ? sh.q[tid] : 0.0f;
  float kv = tid < kD ? sh.k[tid] : 0.0f;
  const float qq = BlockSum(qv * qv, sh.red);
  const float kk = BlockSum(kv * kv, sh.red);
  qv *= rsqrtf(static_cast<float>(kD)) / sqrtf(qq + l2_eps);
  kv *= 1.0f / sqrtf(kk + l2_eps);
  const float kq = BlockSum(qv * kv, sh.red);
  if (tid < kD) {
    sh.q[tid] = qv;
    sh.k[tid] = kv;
  }
  __syncthreads();

  // With S' = diag(α)S: a_j = Σ_i α_i k_i S_ij (S'ᵀk) and b_j = Σ_i α_i q_i S_ij (S'ᵀq).
  float pa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, pb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = row0 + r;
    const float ak = sh.alpha[i] * sh.k[i], aq = sh.alpha[i] * sh.q[i];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      pa[c] += ak * s[r][c];
      pb[c] += aq * s[r][c];
    }
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    sh.part_a[tid >> 5][col + c] = pa[c];
    sh.part_b[tid >> 5][col + c] = pb[c];
  }
  __syncthreads();
  const float beta = SigmoidF(in.b_raw[t * (in.b_stride > 0 ? in.b_stride : num_heads) + h]);
  if (tid < kD) {
    float a = 0.0f, bq = 0.0f;
#pragma unroll
    for (int w = 0; w < kRowGroups; ++w) {
      a += sh.part_a[w][tid];
      bq += sh.part_b[w][tid];
    }
    const float e = sh.v[tid] - a;  // e = v − S'ᵀk
    sh.e[tid] = e;
    sh.o[tid] = bq + beta * e * kq;  // o = S_newᵀq = S'ᵀq + β e (k·q)
  }
  __syncthreads();

  // S_new = S' + β k eᵀ (stays in registers).
  const float4 e4 = *reinterpret_cast<const float4*>(&sh.e[col]);
  const float e_col[4] = {e4.x, e4.y, e4.z, e4.w};
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = row0 + r;
    const float al = sh.alpha[i], bk = beta * sh.k[i];
#pragma unroll
    for (int c = 0; c < 4; ++c) s[r][c] = al * s[r][c] + bk * e_col[c];
  }

  // y = RMSNorm(o)·w ⊙ σ(g_raw). BlockSum's barriers also end this token's shared reads.
  const float ov = tid < kD ? sh.o[tid] : 0.0f;
  const float ss = BlockSum(ov * ov, sh.red);
  if (tid < kD) {
    const float inv = 1.0f / sqrtf(ss / kD + norm_eps);
    const int64_t g_ld = in.g_stride > 0 ? in.g_stride : hd;
    const float gate = SigmoidF(in.g_raw[t * g_ld + h * kD + tid]);
    StoreOut(y + t * hd + h * kD + tid, ov * inv * in.o_norm_w[tid] * gate);
  }
}

// Persistent: grid min(items, kCtasPerSm · SMs) CTAs over items = heads × sequences (head
// fastest), CTA c taking items c, c + gridDim.x, …; 256 threads. Item (h, b): sequence b owns
// tokens [cu_seqlens[b], cu_seqlens[b+1]) (token b alone when cu_seqlens is null: the decode
// step) and state row in.slots[b]. The next item's state is staged into shared memory by
// cp.async while the current one computes, so each SM keeps a state load in flight through the
// math (one CTA an item held the loads back until its previous state was stored).
template <typename StateT, typename OutT>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    KdaRecurrentKernel(KdaDecodeInputs in, const int32_t* __restrict__ cu_seqlens,
                       StateT* __restrict__ state, float* __restrict__ conv_state, int num_heads,
                       int num_items, int conv_size, bool has_lower_bound, float lower_bound,
                       float norm_eps, float l2_eps, bool update_caches, OutT* __restrict__ y) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  STRATA_DYNAMIC_SHARED(smem);
  StateT* stage = reinterpret_cast<StateT*>(smem);
  __shared__ Shared sh;
  const int tid = threadIdx.x;
  const int hd = num_heads * kD;
  const int col = 4 * (tid & 31), row0 = (tid >> 5) * kRowsPerThread;
  auto state_of = [&](int slot, int h) {  // null for padding rows (slot < 0)
    return slot < 0 ? nullptr : state + (static_cast<int64_t>(slot) * num_heads + h) * kD * kD;
  };
  // One commit per item, empty or not, so "wait for all but the newest" always means this item.
  auto stage_item = [&](int item) {
    StateT* s_ptr =
        item < num_items ? state_of(in.slots[item / num_heads], item % num_heads) : nullptr;
    if (s_ptr != nullptr) StageState(s_ptr, stage, tid, row0, col);
    internal::CpAsyncCommit();
  };
  stage_item(blockIdx.x);
  for (int item = blockIdx.x; item < num_items; item += gridDim.x) {
    const int h = item % num_heads, b = item / num_heads;
    const int64_t t_begin = cu_seqlens != nullptr ? cu_seqlens[b] : b;
    const int64_t t_end = cu_seqlens == nullptr    ? b + 1
                          : in.seq_ends != nullptr ? in.seq_ends[b]
                                                   : cu_seqlens[b + 1];
    const int slot = in.slots[b];
    StateT* s_ptr = state_of(slot, h);
    internal::CpAsyncWait<0>();
    float s[kRowsPerThread][4];
    if (s_ptr != nullptr) {
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) Load4(stage + (r * kThreads + tid) * 4, s[r]);
    }
    stage_item(item + gridDim.x);  // this thread's part of the stage is read: refill it
    if (s_ptr == nullptr) {        // padding: outputs 0, no state touched
      for (int64_t t = t_begin; t < t_end; ++t) {
        if (tid < kD) StoreOut(y + t * hd + h * kD + tid, 0.0f);
      }
      continue;
    }
    float* conv_row = conv_state + static_cast<int64_t>(slot) * (conv_size - 1) * 3 * hd;
    for (int task = tid; task < 3 * kD; task += kThreads) {
      for (int j = 0; j < conv_size - 1; ++j) {
        sh.hist[j][task] = conv_row[j * 3 * static_cast<int64_t>(hd) + ConvChannel(task, h, hd)];
      }
    }
    for (int64_t t = t_begin; t < t_end; ++t) {
      ConvAndGate(in, t, h, num_heads, conv_size, has_lower_bound, lower_bound, sh);
      __syncthreads();
      RecurrentToken(in, t, h, num_heads, norm_eps, l2_eps, s, sh, y);
    }
    if (update_caches) {
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) Store4(s_ptr + (row0 + r) * kD + col, s[r]);
      for (int task = tid; task < 3 * kD; task += kThreads) {
        for (int j = 0; j < conv_size - 1; ++j) {
          conv_row[j * 3 * static_cast<int64_t>(hd) + ConvChannel(task, h, hd)] = sh.hist[j][task];
        }
      }
    }
    __syncthreads();  // the next item rewrites the shared vectors
  }
  internal::CpAsyncWait<0>();
}

template <typename StateT, typename OutT>
absl::Status Launch(const KdaDecodeInputs& in, const int32_t* cu_seqlens, StateT* state,
                    float* conv_state, const KdaDecodeParams& p, OutT* y, cudaStream_t stream) {
  if (p.head_dim != kD) return absl::InvalidArgumentError("KdaDecodeStep: head_dim must be 128");
  if (p.conv_size < 1 || p.conv_size > 4 || p.num_heads <= 0 || p.batch < 0) {
    return absl::InvalidArgumentError("KdaDecodeStep: bad params");
  }
  if (p.batch == 0) return absl::OkStatus();
  if (static_cast<int64_t>(p.batch) * p.num_heads > INT_MAX) {
    return absl::InvalidArgumentError("KdaDecodeStep: batch · num_heads must be < 2^31");
  }
  const int items = p.batch * p.num_heads;
  const int ctas = std::min(items, kCtasPerSm * internal::NumSms());
  const auto kernel = KdaRecurrentKernel<StateT, OutT>;
  constexpr int kStage = StageBytes<StateT>();
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStage),
      "KdaRecurrentKernel cudaFuncSetAttribute");
  internal::LaunchKernel(kernel, ctas, kThreads, kStage, stream, in, cu_seqlens, state, conv_state,
                         p.num_heads, items, p.conv_size, p.has_lower_bound, p.lower_bound,
                         p.norm_eps, p.l2_eps, p.update_caches || cu_seqlens == nullptr, y);
  return LaunchStatus("KdaRecurrentKernel launch");
}

}  // namespace

absl::Status KdaDecodeStep(const KdaDecodeInputs& in, float* state, float* conv_state,
                           const KdaDecodeParams& params, float* y, cudaStream_t stream) {
  return Launch(in, nullptr, state, conv_state, params, y, stream);
}
absl::Status KdaDecodeStep(const KdaDecodeInputs& in, float* state, float* conv_state,
                           const KdaDecodeParams& params, uint16_t* y, cudaStream_t stream) {
  return Launch(in, nullptr, state, conv_state, params, y, stream);
}
absl::Status KdaDecodeStepBf16State(const KdaDecodeInputs& in, uint16_t* state, float* conv_state,
                                    const KdaDecodeParams& params, float* y, cudaStream_t stream) {
  return Launch(in, nullptr, state, conv_state, params, y, stream);
}
absl::Status KdaDecodeStepBf16State(const KdaDecodeInputs& in, uint16_t* state, float* conv_state,
                                    const KdaDecodeParams& params, uint16_t* y,
                                    cudaStream_t stream) {
  return Launch(in, nullptr, state, conv_state, params, y, stream);
}

absl::Status KdaPrefillRecurrent(const KdaDecodeInputs& in, const int32_t* cu_seqlens, float* state,
                                 float* conv_state, const KdaDecodeParams& params, uint16_t* y,
                                 cudaStream_t stream) {
  if (cu_seqlens == nullptr) return absl::InvalidArgumentError("KdaPrefill: null cu_seqlens");
  return Launch(in, cu_seqlens, state, conv_state, params, y, stream);
}
absl::Status KdaPrefillRecurrent(const KdaDecodeInputs& in, const int32_t* cu_seqlens, float* state,
                                 float* conv_state, const KdaDecodeParams& params, float* y,
                                 cudaStream_t stream) {
  if (cu_seqlens == nullptr) return absl::InvalidArgumentError("KdaPrefill: null cu_seqlens");
  return Launch(in, cu_seqlens, state, conv_state, params, y, stream);
}
absl::Status KdaPrefillRecurrentBf16State(const KdaDecodeInputs& in, const int32_t* cu_seqlens,
                                          uint16_t* state, float* conv_state,
                                          const KdaDecodeParams& params, uint16_t* y,
                                          cudaStream_t stream) {
  if (cu_seqlens == nullptr) return absl::InvalidArgumentError("KdaPrefill: null cu_seqlens");
  return Launch(in, cu_seqlens, state, conv_state, params, y, stream);
}

}  // namespace strata::kernels::cuda
