#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels/cpu/internal/simd_exp.h"

namespace strata::kernels::cpu {
namespace {

using internal::FirstLanes256;
using internal::FirstLanes512;

constexpr float kInf = std::numeric_limits<float>::infinity();
// Σ exp is summed in f32 lanes for this many elements, then added to the f64 total.
constexpr int64_t kExpBlock = 1024;

bool UseAvx512() { return ActiveIsa() >= Isa::kAvx512; }

// ---- AVX2 -------------------------------------------------------------------------------------

float Max256(const float* x, int64_t n) {
  __m256 m0 = _mm256_set1_ps(-kInf), m1 = m0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
  }
  for (; i < n; i += 8) {
    const __m256i m = FirstLanes256(n - i);
    const __m256 v = _mm256_blendv_ps(m0, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m));
    m0 = _mm256_max_ps(m0, v);
  }
  m0 = _mm256_max_ps(m0, m1);
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

int64_t FirstEqual256(const float* x, int64_t n, float value) {
  const __m256 v = _mm256_set1_ps(value);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = FirstLanes256(n - i);
    const __m256 eq = _mm256_and_ps(_mm256_cmp_ps(_mm256_maskload_ps(x + i, m), v, _CMP_EQ_OQ),
                                    _mm256_castsi256_ps(m));
    const int bits = _mm256_movemask_ps(eq);
    if (bits != 0) return i + __builtin_ctz(static_cast<unsigned>(bits));
  }
  return -1;
}

ExpSum SumExpBelow256(const float* x, int64_t n, float shift, float scale, float below) {
  const __m256 vs = _mm256_set1_ps(shift), vk = _mm256_set1_ps(scale), vb = _mm256_set1_ps(below);
  ExpSum out;
  for (int64_t b = 0; b < n; b += kExpBlock) {
    const int64_t end = std::min(n, b + kExpBlock);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = b; i < end; i += 8) {
      const __m256i m = FirstLanes256(end - i);
      const __m256 v = _mm256_maskload_ps(x + i, m);
      const __m256 lanes = _mm256_castsi256_ps(m);
      const __m256 lt = _mm256_and_ps(_mm256_cmp_ps(v, vb, _CMP_LT_OQ), lanes);
      const __m256 eq = _mm256_and_ps(_mm256_cmp_ps(v, vb, _CMP_EQ_OQ), lanes);
      out.num_equal += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(eq)));
      const __m256 e = internal::Exp256(_mm256_mul_ps(_mm256_sub_ps(v, vs), vk));
      acc = _mm256_add_ps(acc, _mm256_and_ps(e, lt));
    }
    out.sum += internal::HorizontalSum256(acc);
  }
  return out;
}

void ExpShifted256(const float* x, int64_t n, float shift, float scale, float* out) {
  const __m256 vs = _mm256_set1_ps(shift), vk = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = FirstLanes256(n - i);
    const __m256 v = _mm256_maskload_ps(x + i, m);
    const __m256 e = internal::Exp256(_mm256_mul_ps(_mm256_sub_ps(v, vs), vk));
    // NaN logits (and NaN products) weigh nothing.
    _mm256_maskstore_ps(out + i, m, _mm256_and_ps(e, _mm256_cmp_ps(e, e, _CMP_ORD_Q)));
  }
}

// ---- AVX-512 ----------------------------------------------------------------------------------

STRATA_TARGET_AVX512_EXP float Max512(const float* x, int64_t n) {
  __m512 m0 = _mm512_set1_ps(-kInf), m1 = m0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i < n; i += 16) {
    m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(m0, FirstLanes512(n - i), x + i));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

STRATA_TARGET_AVX512_EXP int64_t FirstEqual512(const float* x, int64_t n, float value) {
  const __m512 v = _mm512_set1_ps(value);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = FirstLanes512(n - i);
    const __mmask16 eq = _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, x + i), v, _CMP_EQ_OQ);
    if (eq != 0) return i + __builtin_ctz(static_cast<unsigned>(eq));
  }
  return -1;
}

STRATA_TARGET_AVX512_EXP ExpSum SumExpBelow512(const float* x, int64_t n, float shift, float scale,
                                               float below) {
  const __m512 vs = _mm512_set1_ps(shift), vk = _mm512_set1_ps(scale), vb = _mm512_set1_ps(below);
  ExpSum out;
  for (int64_t b = 0; b < n; b += kExpBlock) {
    const int64_t end = std::min(n, b + kExpBlock);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = b; i < end; i += 16) {
      const __mmask16 m = FirstLanes512(end - i);
      const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
      const __mmask16 lt = _mm512_mask_cmp_ps_mask(m, v, vb, _CMP_LT_OQ);
      const __mmask16 eq = _mm512_mask_cmp_ps_mask(m, v, vb, _CMP_EQ_OQ);
      out.num_equal += __builtin_popcount(static_cast<unsigned>(eq));
      const __m512 e = internal::Exp512(_mm512_mul_ps(_mm512_sub_ps(v, vs), vk));
      acc = _mm512_mask_add_ps(acc, lt, acc, e);
    }
    out.sum += _mm512_reduce_add_ps(acc);
  }
  return out;
}

STRATA_TARGET_AVX512_EXP void ExpShifted512(const float* x, int64_t n, float shift, float scale,
                                            float* out) {
  const __m512 vs = _mm512_set1_ps(shift), vk = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = FirstLanes512(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 e = internal::Exp512(_mm512_mul_ps(_mm512_sub_ps(v, vs), vk));
    _mm512_mask_storeu_ps(out + i, m, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(e, e, _CMP_ORD_Q), e));
  }
}

// ---- Top-k --------------------------------------------------------------------------------------

// Better as a function object: std::sort and std::nth_element inline it (through a function
// pointer, as `Better` itself, GCC calls it per comparison: 13 % of a demo-model decode step).
constexpr auto kBetter = [](const ScoredId& a, const ScoredId& b) { return Better(a, b); };

// The running selection: buf holds ≥ k candidates; once compacted, buf[0, k) are the k best seen
// so far and `threshold` is the k-th value. Entries arrive in increasing id order, so a later
// entry equal to the threshold ranks below the k-th and is never needed: filters use value >
// threshold.
class Selection {
 public:
  Selection(ScoredId* buf, int64_t k) : buf_(buf), k_(k), cap_(TopKScratchSize(k)) {}

  float threshold() const { return threshold_; }
  int64_t capacity() const { return cap_; }

  void Append(float value, int32_t id) { buf_[count_++] = {value, id}; }
  void Push(float value, int32_t id) {
    if (!(value > threshold_)) return;
    if (count_ == cap_) {
      Compact();
      if (!(value > threshold_)) return;
    }
    buf_[count_++] = {value, id};
  }
  void Compact() {
    std::nth_element(buf_, buf_ + k_ - 1, buf_ + count_, kBetter);
    count_ = k_;
    threshold_ = buf_[k_ - 1].value;
  }
  void Finish() {
    if (count_ > k_) std::nth_element(buf_, buf_ + k_ - 1, buf_ + count_, kBetter);
    std::sort(buf_, buf_ + k_, kBetter);
  }

 private:
  ScoredId* buf_;
  int64_t k_, cap_, count_ = 0;
  float threshold_ = -kInf;
};

void Filter256(const float* x, int64_t begin, int64_t n, Selection& sel) {
  for (int64_t i = begin; i < n; i += 8) {
    const __m256i m = FirstLanes256(n - i);
    const __m256 gt =
        _mm256_cmp_ps(_mm256_maskload_ps(x + i, m), _mm256_set1_ps(sel.threshold()), _CMP_GT_OQ);
    unsigned bits =
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_and_ps(gt, _mm256_castsi256_ps(m))));
    for (; bits != 0; bits &= bits - 1) {
      const int64_t j = i + __builtin_ctz(bits);
      sel.Push(x[j], static_cast<int32_t>(j));
    }
  }
}

STRATA_TARGET_AVX512_EXP void Filter512(const float* x, int64_t begin, int64_t n, Selection& sel) {
  for (int64_t i = begin; i < n; i += 16) {
    const __mmask16 m = FirstLanes512(n - i);
    unsigned bits = _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, x + i),
                                            _mm512_set1_ps(sel.threshold()), _CMP_GT_OQ);
    for (; bits != 0; bits &= bits - 1) {
      const int64_t j = i + __builtin_ctz(bits);
      sel.Push(x[j], static_cast<int32_t>(j));
    }
  }
}

// ---- Penalties ----------------------------------------------------------------------------------

void Repetition256(float* x, const uint8_t* seen, int64_t n, float penalty) {
  const __m256 p = _mm256_set1_ps(penalty), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i s =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(seen + i)));
    const __m256 mask = _mm256_castsi256_ps(_mm256_cmpgt_epi32(s, _mm256_setzero_si256()));
    if (_mm256_movemask_ps(mask) == 0) continue;
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 pen = _mm256_blendv_ps(_mm256_mul_ps(v, p), _mm256_div_ps(v, p),
                                        _mm256_cmp_ps(v, zero, _CMP_GT_OQ));
    _mm256_storeu_ps(x + i, _mm256_blendv_ps(v, pen, mask));
  }
  for (; i < n; ++i) {
    if (seen[i]) x[i] = x[i] > 0 ? x[i] / penalty : x[i] * penalty;
  }
}

STRATA_TARGET_AVX512_EXP void Repetition512(float* x, const uint8_t* seen, int64_t n,
                                            float penalty) {
  const __m512 p = _mm512_set1_ps(penalty), zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = FirstLanes512(n - i);
    const __m128i s = _mm_maskz_loadu_epi8(m, seen + i);
    const __mmask16 hit = _mm_mask_test_epi8_mask(m, s, s);
    if (hit == 0) continue;
    const __m512 v = _mm512_maskz_loadu_ps(hit, x + i);
    const __mmask16 pos = _mm512_mask_cmp_ps_mask(hit, v, zero, _CMP_GT_OQ);
    __m512 out = _mm512_mask_mul_ps(v, hit, v, p);
    out = _mm512_mask_div_ps(out, pos, v, p);
    _mm512_mask_storeu_ps(x + i, hit, out);
  }
}

void Frequency256(float* x, const int32_t* counts, int64_t n, float presence, float frequency) {
  const __m256 pr = _mm256_set1_ps(presence), fr = _mm256_set1_ps(frequency);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(counts + i));
    const __m256 mask = _mm256_castsi256_ps(_mm256_cmpgt_epi32(c, _mm256_setzero_si256()));
    if (_mm256_movemask_ps(mask) == 0) continue;
    const __m256 pen = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), fr, pr);
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(x + i, _mm256_blendv_ps(v, _mm256_sub_ps(v, pen), mask));
  }
  for (; i < n; ++i) {
    if (counts[i] > 0) x[i] -= std::fma(static_cast<float>(counts[i]), frequency, presence);
  }
}

STRATA_TARGET_AVX512_EXP void Frequency512(float* x, const int32_t* counts, int64_t n,
                                           float presence, float frequency) {
  const __m512 pr = _mm512_set1_ps(presence), fr = _mm512_set1_ps(frequency);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = FirstLanes512(n - i);
    const __m512i c = _mm512_maskz_loadu_epi32(m, counts + i);
    const __mmask16 hit = _mm512_mask_cmpgt_epi32_mask(m, c, _mm512_setzero_si512());
    if (hit == 0) continue;
    const __m512 pen = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), fr, pr);
    const __m512 v = _mm512_maskz_loadu_ps(hit, x + i);
    _mm512_mask_storeu_ps(x + i, hit, _mm512_sub_ps(v, pen));
  }
}

}  // namespace

float Max(const float* x, int64_t n) {
  CHECK_GE(n, 1);
  return UseAvx512() ? Max512(x, n) : Max256(x, n);
}

int64_t Argmax(const float* x, int64_t n) {
  const float max = Max(x, n);
  const int64_t i = UseAvx512() ? FirstEqual512(x, n, max) : FirstEqual256(x, n, max);
  return i >= 0 ? i : 0;  // only when every x_i is NaN
}

ExpSum SumExpBelow(const float* x, int64_t n, float shift, float scale, float below) {
  CHECK_GE(n, 0);
  return UseAvx512() ? SumExpBelow512(x, n, shift, scale, below)
                     : SumExpBelow256(x, n, shift, scale, below);
}

void ExpShifted(const float* x, int64_t n, float shift, float scale, float* out) {
  CHECK_GE(n, 0);
  if (UseAvx512()) {
    ExpShifted512(x, n, shift, scale, out);
  } else {
    ExpShifted256(x, n, shift, scale, out);
  }
}

double LogSumExp(const float* x, int64_t n) {
  const float max = Max(x, n);
  return static_cast<double>(max) + std::log(SumExpBelow(x, n, max, 1.0f, kInf).sum);
}

void TopK(const float* x, int64_t n, int64_t k, ScoredId* scratch) {
  CHECK(k >= 1 && k <= n) << "TopK: k " << k << " of " << n;
  Selection sel(scratch, k);
  const int64_t fill = std::min(n, sel.capacity());
  for (int64_t i = 0; i < fill; ++i) {
    sel.Append(std::isnan(x[i]) ? -kInf : x[i], static_cast<int32_t>(i));
  }
  if (fill < n) {
    sel.Compact();
    if (UseAvx512()) {
      Filter512(x, fill, n, sel);
    } else {
      Filter256(x, fill, n, sel);
    }
  }
  sel.Finish();
}

void ApplyRepetitionPenalty(float* x, const uint8_t* seen, int64_t n, float penalty) {
  if (UseAvx512()) {
    Repetition512(x, seen, n, penalty);
  } else {
    Repetition256(x, seen, n, penalty);
  }
}

void ApplyPresenceFrequencyPenalty(float* x, const int32_t* counts, int64_t n, float presence,
                                   float frequency) {
  if (UseAvx512()) {
    Frequency512(x, counts, n, presence, frequency);
  } else {
    Frequency256(x, counts, n, presence, frequency);
  }
}

}  // namespace strata::kernels::cpu
