#include "kernels/reference/router.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "kernels/reference/internal/scalar_math.h"

namespace strata::kernels {
namespace {

// Indices of the `count` largest values, ordered by descending value; ties go to the lower index.
std::vector<int> TopIndices(const std::vector<float>& values, int count) {
  std::vector<int> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return values[a] > values[b]; });
  order.resize(static_cast<size_t>(count));
  return order;
}

// Group-limited selection scores: experts outside the topk_group best groups get 0.0 (as the
// reference implementations do: masked_fill(..., 0.0), not −inf). A group's score is the sum of
// its two largest biased scores (its only score when the group has one expert).
void MaskGroups(const RouterParams& p, std::vector<float>& biased) {
  const int group_size = p.num_experts / p.num_groups;
  std::vector<float> group_score(static_cast<size_t>(p.num_groups));
  for (int grp = 0; grp < p.num_groups; ++grp) {
    std::vector<float> members(biased.begin() + grp * group_size,
                               biased.begin() + (grp + 1) * group_size);
    const std::vector<int> best = TopIndices(members, std::min(2, group_size));
    float sum = 0.0f;
    for (int b : best) {
      sum += members[b];
    }
    group_score[grp] = sum;
  }
  std::vector<bool> keep(static_cast<size_t>(p.num_groups), false);
  for (int grp : TopIndices(group_score, p.topk_group)) {
    keep[grp] = true;
  }
  for (int e = 0; e < p.num_experts; ++e) {
    if (!keep[e / group_size]) {
      biased[e] = 0.0f;
    }
  }
}

}  // namespace

void RouteReference(const float* logits, int64_t num_tokens, const float* bias,
                    const RouterParams& params, int32_t* expert_ids, float* weights) {
  const RouterParams& p = params;
  CHECK_GE(num_tokens, 0);
  CHECK_GT(p.num_experts, 0);
  CHECK(p.top_k >= 1 && p.top_k <= p.num_experts) << "top_k " << p.top_k;
  CHECK(p.num_groups >= 1 && p.num_experts % p.num_groups == 0) << "num_groups " << p.num_groups;
  CHECK(p.topk_group >= 1 && p.topk_group <= p.num_groups) << "topk_group " << p.topk_group;
#pragma omp parallel for schedule(static) if (num_tokens > 16)
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits + t * p.num_experts;
    std::vector<float> score(static_cast<size_t>(p.num_experts));   // s, f32
    std::vector<float> biased(static_cast<size_t>(p.num_experts));  // s + bias, f32
    for (int e = 0; e < p.num_experts; ++e) {
      score[e] = static_cast<float>(internal::Sigmoid(row[e]));
      biased[e] = bias != nullptr ? score[e] + bias[e] : score[e];
    }
    if (p.num_groups > 1) {
      MaskGroups(p, biased);
    }
    const std::vector<int> chosen = TopIndices(biased, p.top_k);
    double sum = 0.0;
    for (int e : chosen) {
      sum += score[e];
    }
    const bool renormalize = p.renormalize && p.top_k > 1;
    for (int i = 0; i < p.top_k; ++i) {
      const int e = chosen[i];
      double w = score[e];
      if (renormalize) {
        w /= sum + 1e-20;
      }
      expert_ids[t * p.top_k + i] = e;
      weights[t * p.top_k + i] = static_cast<float>(w * p.scaling);
    }
  }
}

}  // namespace strata::kernels
