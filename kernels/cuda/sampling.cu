#include "kernels/cuda/sampling.h"

#include <string>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/launch.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kChunk = kSamplingChunk;  // a power of two (bitonic sort)
constexpr uint64_t kNoKey = ~0ull;      // ranks after every token

struct Shared {
  uint64_t keys[kChunk];  // the current chunk's keys, sorted (best first)
  double probs[kChunk];   // exp((x − x_max)/T) of the current chunk, rank order
  unsigned int hist[256];
  double red_d[kThreads / 32];
  float red_v[kThreads / 32];
  int red_i[kThreads / 32];
  unsigned int count;
  int digit;
  unsigned int remaining;
  int done;
  int result;
};

// 64-bit rank key: smaller = better. High word: logit bits mapped so that larger logits give
// smaller keys (−0 as +0, so equal values tie; NaN last); low word: the id (ties → lower id).
__device__ __forceinline__ uint64_t RankKey(float x, int id) {
  uint32_t bits = __float_as_uint(x == 0.0f ? 0.0f : x);
  uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  if (x != x) ascending = 0;
  return (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(id);
}

__device__ __forceinline__ bool Better(float v, int i, float best_v, int best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

// Block-wide best (value, id) (value descending, then id ascending); result in every thread.
__device__ void BlockBest(float& v, int& i, Shared& sh) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
    const int oi = __shfl_xor_sync(0xffffffffu, i, offset);
    if (Better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
  if ((threadIdx.x & 31) == 0) {
    sh.red_v[threadIdx.x >> 5] = v;
    sh.red_i[threadIdx.x >> 5] = i;
  }
  __syncthreads();
  v = sh.red_v[0];
  i = sh.red_i[0];
  for (int w = 1; w < kThreads / 32; ++w) {
    if (Better(sh.red_v[w], sh.red_i[w], v, i)) {
      v = sh.red_v[w];
      i = sh.red_i[w];
    }
  }
  __syncthreads();
}

// The row's best (value, id) in every thread.
__device__ void RowBest(const float* row, int vocab, float& v, int& i, Shared& sh) {
  v = -INFINITY;
  i = 0x7fffffff;
  for (int c = threadIdx.x; c < vocab; c += kThreads) {
    if (Better(row[c], c, v, i)) {
      v = row[c];
      i = c;
    }
  }
  BlockBest(v, i, sh);
}

__device__ double BlockSum(double x, Shared& sh) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  if ((threadIdx.x & 31) == 0) sh.red_d[threadIdx.x >> 5] = x;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += sh.red_d[w];
  __syncthreads();
  return total;
}

// The key of the k-th best token (1 ≤ k ≤ vocab): radix select, 8 bits per pass from the top.
__device__ uint64_t SelectKth(const float* row, int vocab, unsigned int k, Shared& sh) {
  if (k >= static_cast<unsigned int>(vocab)) return kNoKey - 1;  // ≥ every real key
  uint64_t prefix = 0, mask = 0;
  unsigned int remaining = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += kThreads) sh.hist[d] = 0;
    __syncthreads();
    // Uniform trip count so whole warps meet in __match_any_sync; lanes with the same digit
    // add once (most keys share their top bytes: plain atomics would serialise on one bin).
    for (int base = 0; base < vocab; base += kThreads) {
      const int c = base + static_cast<int>(threadIdx.x);
      int digit = 256;  // no bin
      if (c < vocab) {
        const uint64_t key = RankKey(row[c], c);
        if ((key & mask) == prefix) digit = static_cast<int>((key >> shift) & 0xffu);
      }
      const unsigned int peers = __match_any_sync(0xffffffffu, digit);
      if (digit < 256 && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) {
        atomicAdd(&sh.hist[digit], static_cast<unsigned int>(__popc(peers)));
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned int before = 0;
      int d = 0;
      while (d < 255 && before + sh.hist[d] < remaining) before += sh.hist[d++];
      sh.digit = d;
      sh.remaining = remaining - before;
    }
    __syncthreads();
    prefix |= static_cast<uint64_t>(sh.digit) << shift;
    mask |= 0xffull << shift;
    remaining = sh.remaining;
    __syncthreads();
  }
  return prefix;
}

// Loads the tokens with lo < key ≤ hi (lo ignored when !has_lo) into sh.keys, sorted, and their
// probabilities into sh.probs. Returns how many (≤ kChunk by the caller's choice of hi).
__device__ int LoadChunk(const float* row, int vocab, bool has_lo, uint64_t lo, uint64_t hi,
                         double max_logit, double inv_t, Shared& sh) {
  for (int i = threadIdx.x; i < kChunk; i += kThreads) sh.keys[i] = kNoKey;
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  for (int c = threadIdx.x; c < vocab; c += kThreads) {
    const uint64_t key = RankKey(row[c], c);
    if ((!has_lo || key > lo) && key <= hi) {
      const unsigned int slot = atomicAdd(&sh.count, 1u);
      if (slot < kChunk) sh.keys[slot] = key;
    }
  }
  __syncthreads();
  for (int size = 2; size <= kChunk; size <<= 1) {  // bitonic sort, ascending keys
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < kChunk; i += kThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const uint64_t a = sh.keys[i], b = sh.keys[j];
          const bool up = (i & size) == 0;
          if ((a > b) == up) {
            sh.keys[i] = b;
            sh.keys[j] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  const int n = min(static_cast<int>(sh.count), kChunk);
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int id = static_cast<int>(sh.keys[i] & 0xffffffffu);
    sh.probs[i] = exp(__dmul_rn(__dsub_rn(static_cast<double>(row[id]), max_logit), inv_t));
  }
  __syncthreads();
  return n;
}

// Engine step order 1–3 (ApplyPenalties): bias, then repetition, then presence/frequency.
__device__ void ApplyPenalties(const SamplingInputs& in, int64_t r, int vocab,
                               const SamplingRowParams& p, float* row) {
  if (in.bias_offsets != nullptr && threadIdx.x == 0) {
    for (int b = in.bias_offsets[r]; b < in.bias_offsets[r + 1]; ++b) {
      const int id = in.bias_ids[b];
      if (id >= 0 && id < vocab) row[id] = __fadd_rn(row[id], in.bias_values[b]);
    }
  }
  __syncthreads();
  // The history lists each id once: its threads touch distinct logits.
  const bool repetition = p.repetition_penalty != 1.0f;
  const bool frequency = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (in.history_offsets != nullptr && (repetition || frequency)) {
    for (int h = in.history_offsets[r] + static_cast<int>(threadIdx.x);
         h < in.history_offsets[r + 1]; h += kThreads) {
      const int id = in.history_ids[h];
      if (id < 0 || id >= vocab) continue;
      float x = row[id];
      if (repetition) {
        x = x > 0.0f ? __fdiv_rn(x, p.repetition_penalty) : __fmul_rn(x, p.repetition_penalty);
      }
      const int count = in.history_counts[h];
      if (frequency && count > 0) {
        x = __fsub_rn(
            x, __fmaf_rn(static_cast<float>(count), p.frequency_penalty, p.presence_penalty));
      }
      row[id] = x;
    }
  }
  __syncthreads();
}

// Walks the ranks [0, limit) chunk by chunk, calling visit(rank, chunk_index) on thread 0 in
// rank order until it returns true (then sh.done = 1). Reuses a loaded first chunk.
// With max_chunks > 0 a walk that would load chunk max_chunks sets sh.result = kSampleOnHost.
template <typename Visit>
__device__ void WalkRanks(const float* row, int vocab, int limit, int max_chunks, double max_logit,
                          double inv_t, int& loaded_base, Shared& sh, Visit visit) {
  bool has_lo = false;
  uint64_t lo = 0;  // the last key of the previous chunk
  if (threadIdx.x == 0) sh.done = 0;
  __syncthreads();
  for (int base = 0; base < limit; base += kChunk) {
    const int n = min(kChunk, limit - base);
    if (max_chunks > 0 && base >= max_chunks * kChunk) {  // uniform: every thread stops
      if (threadIdx.x == 0) sh.result = kSampleOnHost;
      break;
    }
    // Walks have non-increasing limits, so a loaded chunk holds at least these n ranks.
    if (loaded_base != base) {
      const uint64_t hi = SelectKth(row, vocab, static_cast<unsigned int>(base + n), sh);
      const int got = LoadChunk(row, vocab, has_lo, lo, hi, max_logit, inv_t, sh);
      loaded_base = base;
      if (got != n && threadIdx.x == 0) sh.result = -1;  // never for consistent keys
    }
    if (threadIdx.x == 0 && sh.result == 0) {
      for (int i = 0; i < n && !sh.done; ++i) sh.done = visit(base + i, i) ? 1 : 0;
    }
    __syncthreads();
    if (sh.done || sh.result != 0) break;
    has_lo = true;
    lo = sh.keys[n - 1];
    __syncthreads();  // everyone has read keys[n − 1] before the next load
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    SampleKernel(SamplingInputs in, int vocab, int32_t* __restrict__ tokens) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ Shared sh;
  const int64_t r = blockIdx.x;
  const SamplingRowParams p = in.params[r];
  float* row = in.logits + r * vocab;
  ApplyPenalties(in, r, vocab, p, row);
  float best_v;
  int best_i;
  RowBest(row, vocab, best_v, best_i, sh);
  if (p.temperature <= 1e-5f) {  // SamplingParams::greedy()
    if (threadIdx.x == 0) tokens[r] = best_i;
    return;
  }
  if (threadIdx.x == 0) sh.result = 0;
  // engine Sampler::Sample: not greedy → DrawFromBest with keep = top_k if 0 < top_k < vocab.
  const int keep = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
  const double max_logit = best_v, inv_t = 1.0 / static_cast<double>(p.temperature);
  int loaded_base = -1;
  // Σ p over the kept tokens: in rank order when they fit one chunk (as the engine), else a
  // block reduction over the tokens ranked ≤ keep.
  double total = 0.0;
  if (keep <= kChunk) {
    WalkRanks(row, vocab, keep, 0, max_logit, inv_t, loaded_base, sh, [&](int, int i) {
      total = __dadd_rn(total, sh.probs[i]);
      return false;
    });
    if (threadIdx.x == 0) sh.red_d[0] = total;
    __syncthreads();
    total = sh.red_d[0];
    __syncthreads();
  } else {
    const uint64_t last = SelectKth(row, vocab, static_cast<unsigned int>(keep), sh);
    double part = 0.0;
    for (int c = threadIdx.x; c < vocab; c += kThreads) {
      if (RankKey(row[c], c) <= last) {
        part += exp(__dmul_rn(__dsub_rn(static_cast<double>(row[c]), max_logit), inv_t));
      }
    }
    total = BlockSum(part, sh);
  }
  // engine DrawFromBest, in its order: cut = keep (top-k); the top-p cut over the ranks; the
  // min-p cut at ranks 1 .. cut−1; kept mass Σ_{rank<cut} p in rank order; then the draw. The
  // two cuts share one walk: a min-p stop at rank r precedes the top-p test at r, as the
  // engine's min-p loop only looks below the top-p cut.
  int cut = keep;
  double kept = total;
  if (p.top_p < 1.0f || p.min_p > 0.0f) {
    // engine: floor = min_p · probs[0], and probs[0] = exp(0) = 1.
    const double min_p_floor = static_cast<double>(p.min_p);
    double mass = 0.0, kept_sum = 0.0;
    int found = keep;
    WalkRanks(row, vocab, keep, in.max_ranked_chunks, max_logit, inv_t, loaded_base, sh,
              [&](int rank, int i) {
                const double pr = sh.probs[i];
                if (p.min_p > 0.0f && rank >= 1 && pr < min_p_floor) {
                  found = rank;
                  return true;
                }
                kept_sum = __dadd_rn(kept_sum, pr);
                if (p.top_p < 1.0f) {
                  mass = __dadd_rn(mass, __ddiv_rn(pr, total));
                  if (mass >= static_cast<double>(p.top_p)) {
                    found = rank + 1;
                    return true;
                  }
                }
                return false;
              });
    if (threadIdx.x == 0) {
      sh.red_d[0] = kept_sum;
      sh.red_i[0] = found;
    }
    __syncthreads();
    kept = sh.red_d[0];
    cut = sh.red_i[0];
    __syncthreads();
  }
  double draw = __dmul_rn(in.uniforms[r], kept);
  int chosen = -1;
  WalkRanks(row, vocab, cut, in.max_ranked_chunks, max_logit, inv_t, loaded_base, sh,
            [&](int rank, int i) {
              draw = __dsub_rn(draw, sh.probs[i]);
              if (draw < 0.0 || rank == cut - 1) {
                chosen = static_cast<int>(sh.keys[i] & 0xffffffffu);
                return true;
              }
              return false;
            });
  if (threadIdx.x == 0) tokens[r] = sh.result != 0 ? sh.result : chosen;
}

// engine StepSampler: log_z = max + log Σ exp(x − max) (f64 here, any order), the chosen
// token's x − log_z, the best n by rank key with theirs.
__global__ void __launch_bounds__(kThreads)
    LogprobKernel(LogprobInputs in, int vocab, int max_top, LogprobOutputs out) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  __shared__ Shared sh;
  const int64_t r = blockIdx.x;
  const LogprobRow lr = in.rows[r];
  const float* row = in.logits + static_cast<int64_t>(lr.logits_row) * vocab;
  float best_v;
  int best_i;
  RowBest(row, vocab, best_v, best_i, sh);
  const double max_logit = best_v;
  double part = 0.0;
  for (int c = threadIdx.x; c < vocab; c += kThreads) {
    part += exp(static_cast<double>(row[c]) - max_logit);
  }
  const double log_z = max_logit + log(BlockSum(part, sh));
  if (threadIdx.x == 0) {
    const int token = in.tokens[lr.token_row];
    out.token_logprob[r] = token >= 0 && token < vocab
                               ? static_cast<float>(static_cast<double>(row[token]) - log_z)
                               : NAN;  // the caller computes it
  }
  const int n = min(min(lr.num_top, max_top), vocab);
  if (n <= 0) return;  // uniform per block
  const uint64_t hi = SelectKth(row, vocab, static_cast<unsigned int>(n), sh);
  LoadChunk(row, vocab, false, 0, hi, max_logit, 1.0, sh);
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int id = static_cast<int>(sh.keys[i] & 0xffffffffu);
    out.top_ids[r * max_top + i] = id;
    out.top_logprobs[r * max_top + i] = static_cast<float>(static_cast<double>(row[id]) - log_z);
  }
}

}  // namespace

absl::Status SampleTokens(const SamplingInputs& in, int64_t rows, int64_t vocab, int32_t* tokens,
                          cudaStream_t stream) {
  if (rows < 0 || rows > 0x7fffffff || vocab < 1 || vocab >= 0x7fffffff) {
    return absl::InvalidArgumentError("SampleTokens: bad rows or vocab");
  }
  if (in.logits == nullptr || in.params == nullptr || in.uniforms == nullptr || tokens == nullptr) {
    return absl::InvalidArgumentError("SampleTokens: null logits, params, uniforms or tokens");
  }
  if (in.bias_offsets != nullptr && (in.bias_ids == nullptr || in.bias_values == nullptr)) {
    return absl::InvalidArgumentError("SampleTokens: bias_offsets without ids/values");
  }
  if (in.history_offsets != nullptr &&
      (in.history_ids == nullptr || in.history_counts == nullptr)) {
    return absl::InvalidArgumentError("SampleTokens: history_offsets without ids/counts");
  }
  if (rows == 0) return absl::OkStatus();
  internal::LaunchKernel(SampleKernel, static_cast<unsigned>(rows), kThreads, 0, stream, in,
                         static_cast<int>(vocab), tokens);
  return LaunchStatus("SampleKernel launch");
}

absl::Status RowLogprobs(const LogprobInputs& in, int64_t rows, int64_t vocab, int max_top,
                         const LogprobOutputs& out, cudaStream_t stream) {
  if (rows < 0 || rows > 0x7fffffff || vocab < 1 || vocab >= 0x7fffffff) {
    return absl::InvalidArgumentError("RowLogprobs: bad rows or vocab");
  }
  if (max_top < 0 || max_top > kSamplingChunk) {
    return absl::InvalidArgumentError("RowLogprobs: max_top " + std::to_string(max_top) +
                                      " outside [0, " + std::to_string(kSamplingChunk) + "]");
  }
  if (in.logits == nullptr || in.tokens == nullptr || in.rows == nullptr ||
      out.token_logprob == nullptr ||
      (max_top > 0 && (out.top_ids == nullptr || out.top_logprobs == nullptr))) {
    return absl::InvalidArgumentError("RowLogprobs: null logits, tokens, rows or outputs");
  }
  if (rows == 0) return absl::OkStatus();
  internal::LaunchKernel(LogprobKernel, static_cast<unsigned>(rows), kThreads, 0, stream, in,
                         static_cast<int>(vocab), max_top, out);
  return LaunchStatus("LogprobKernel launch");
}

}  // namespace strata::kernels::cuda
