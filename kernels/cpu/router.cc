#include "kernels/cpu/router.h"

#include <algorithm>

#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels/cpu/internal/simd_exp.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu {
namespace {

using internal::FirstLanes256;
using internal::FirstLanes512;

constexpr int kMaxGroups = 256;
constexpr int64_t kParallelTokens = 16;

// ---- Scores: s (sigmoid or exp(x − shift)) and s' = s + bias ----------------------------------

// σ(x) = 1 / (1 + e^−x) for x ≥ 0, e^x / (1 + e^x) below: e is only taken of −|x|.
__m256 Sigmoid256(__m256 x) {
  const __m256 abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 e = internal::Exp256(_mm256_sub_ps(_mm256_setzero_ps(), abs));
  const __m256 denom = _mm256_add_ps(_mm256_set1_ps(1.0f), e);
  const __m256 pos = _mm256_div_ps(_mm256_set1_ps(1.0f), denom);
  const __m256 neg = _mm256_div_ps(e, denom);
  return _mm256_blendv_ps(neg, pos, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
}

// Writes s and s' for one token; softmax: s = e^(x − max) unnormalised (the caller divides).
// Returns Σ s (only meaningful for softmax).
float Scores256(const float* x, int n, const float* bias, bool softmax, float shift, float* s,
                float* biased) {
  __m256 total = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const __m256i m = FirstLanes256(n - i);
    const __m256 v = _mm256_maskload_ps(x + i, m);
    const __m256 sc = softmax
                          ? _mm256_and_ps(internal::Exp256(_mm256_sub_ps(v, _mm256_set1_ps(shift))),
                                          _mm256_castsi256_ps(m))
                          : Sigmoid256(v);
    total = _mm256_add_ps(total, sc);
    _mm256_maskstore_ps(s + i, m, sc);
    _mm256_maskstore_ps(biased + i, m,
                        bias != nullptr ? _mm256_add_ps(sc, _mm256_maskload_ps(bias + i, m)) : sc);
  }
  return internal::HorizontalSum256(total);
}

STRATA_TARGET_AVX512_EXP __m512 Sigmoid512(__m512 x) {
  const __m512 abs = _mm512_abs_ps(x);
  const __m512 e = internal::Exp512(_mm512_sub_ps(_mm512_setzero_ps(), abs));
  const __m512 denom = _mm512_add_ps(_mm512_set1_ps(1.0f), e);
  const __mmask16 nonneg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mask_div_ps(_mm512_div_ps(e, denom), nonneg, _mm512_set1_ps(1.0f), denom);
}

STRATA_TARGET_AVX512_EXP float Scores512(const float* x, int n, const float* bias, bool softmax,
                                         float shift, float* s, float* biased) {
  __m512 total = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = FirstLanes512(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 sc =
        softmax ? _mm512_maskz_mov_ps(m, internal::Exp512(_mm512_sub_ps(v, _mm512_set1_ps(shift))))
                : Sigmoid512(v);
    total = _mm512_add_ps(total, sc);
    _mm512_mask_storeu_ps(s + i, m, sc);
    _mm512_mask_storeu_ps(
        biased + i, m,
        bias != nullptr ? _mm512_add_ps(sc, _mm512_maskz_loadu_ps(m, bias + i)) : sc);
  }
  return _mm512_reduce_add_ps(total);
}

// ---- Selection ---------------------------------------------------------------------------------

// The `count` best of values[0, n) by (value desc, index asc) into out (sorted). Small n.
void TopIndices(const float* values, int n, int count, ScoredId* scratch, int* out) {
  TopK(values, n, count, scratch);
  for (int i = 0; i < count; ++i) out[i] = scratch[i].id;
}

// Experts outside the topk_group best groups get s' = 0.0 (the reference's masked_fill).
void MaskGroups(const RouterParams& p, float* biased) {
  const int group_size = p.num_experts / p.num_groups;
  float group_score[kMaxGroups];
  for (int g = 0; g < p.num_groups; ++g) {
    const float* members = biased + g * group_size;
    int best = 0;
    for (int e = 1; e < group_size; ++e) best = members[e] > members[best] ? e : best;
    float sum = 0.0f + members[best];
    if (group_size > 1) {
      int second = best == 0 ? 1 : 0;
      for (int e = 0; e < group_size; ++e) {
        if (e != best && members[e] > members[second]) second = e;
      }
      sum += members[second];
    }
    group_score[g] = sum;
  }
  ScoredId scratch[TopKScratchSize(kMaxGroups)];
  int kept[kMaxGroups];
  TopIndices(group_score, p.num_groups, p.topk_group, scratch, kept);
  bool keep[kMaxGroups] = {};
  for (int i = 0; i < p.topk_group; ++i) keep[kept[i]] = true;
  for (int e = 0; e < p.num_experts; ++e) {
    if (!keep[e / group_size]) biased[e] = 0.0f;
  }
}

void RouteToken(const float* row, const float* bias, const RouterParams& p, RouterScoring scoring,
                bool avx512, int32_t* ids, float* weights) {
  const int n = p.num_experts;
  alignas(64) float s[kMaxRouterExperts];
  alignas(64) float biased[kMaxRouterExperts];
  const bool softmax = scoring == RouterScoring::kSoftmax;
  if (softmax) {
    const float shift = Max(row, n);
    const float total = avx512 ? Scores512(row, n, nullptr, true, shift, s, biased)
                               : Scores256(row, n, nullptr, true, shift, s, biased);
    for (int e = 0; e < n; ++e) {
      s[e] /= total;
      biased[e] = bias != nullptr ? s[e] + bias[e] : s[e];
    }
  } else if (avx512) {
    Scores512(row, n, bias, false, 0.0f, s, biased);
  } else {
    Scores256(row, n, bias, false, 0.0f, s, biased);
  }
  if (p.num_groups > 1) MaskGroups(p, biased);
  ScoredId scratch[TopKScratchSize(kMaxRouterTopK)];
  TopK(biased, n, p.top_k, scratch);
  double sum = 0.0;
  for (int i = 0; i < p.top_k; ++i) sum += s[scratch[i].id];
  const bool renormalize = p.renormalize && p.top_k > 1;
  for (int i = 0; i < p.top_k; ++i) {
    const int e = scratch[i].id;
    double w = s[e];
    if (renormalize) w /= sum + 1e-20;
    ids[i] = e;
    weights[i] = static_cast<float>(w * p.scaling);
  }
}

}  // namespace

void Route(const float* logits, int64_t num_tokens, const float* bias, const RouterParams& params,
           int32_t* expert_ids, float* weights, RouterScoring scoring) {
  const RouterParams& p = params;
  CHECK_GE(num_tokens, 0);
  CHECK(p.num_experts > 0 && p.num_experts <= kMaxRouterExperts) << "num_experts " << p.num_experts;
  CHECK(p.top_k >= 1 && p.top_k <= p.num_experts && p.top_k <= kMaxRouterTopK)
      << "top_k " << p.top_k;
  CHECK(p.num_groups >= 1 && p.num_groups <= kMaxGroups && p.num_experts % p.num_groups == 0)
      << "num_groups " << p.num_groups;
  CHECK(p.topk_group >= 1 && p.topk_group <= p.num_groups) << "topk_group " << p.topk_group;
  const Isa isa = ActiveIsa();
  if (isa == Isa::kScalar && scoring == RouterScoring::kSigmoid) {
    RouteReference(logits, num_tokens, bias, params, expert_ids, weights);
    return;
  }
  const bool avx512 = isa >= Isa::kAvx512;
  auto token = [&](int64_t t) {
    RouteToken(logits + t * p.num_experts, bias, p, scoring, avx512, expert_ids + t * p.top_k,
               weights + t * p.top_k);
  };
  ParallelFor(num_tokens, num_tokens > kParallelTokens, token);
}

}  // namespace strata::kernels::cpu
