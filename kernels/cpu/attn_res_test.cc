#include "kernels/cpu/attn_res.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/internal/isa_testing.h"
#include "kernels/cpu/internal/random_testing.h"
#include "kernels/reference/attn_res.h"

namespace strata::kernels::cpu {
namespace {

using internal::IsaCap;
using internal::SupportedIsas;

// out is a convex combination of the sources, so errors scale with max_i |v_i[c]|. f32 dot
// products (z error ~1e-6·Σ|w·v|/rms with |z| ~ 1 here) and f32 mixing stay below 1e-5 of that;
// 1e-4 still catches a wrong weight, source or token (errors of order 1).
constexpr double kTol = 1e-4;

using internal::Normal;

struct Case {
  int num_sources;
  int64_t num_tokens;
  int64_t dim;
};

void CheckCase(const Case& c, std::mt19937& rng, const char* isa) {
  std::vector<std::vector<float>> src;
  std::vector<const float*> ptrs;
  for (int i = 0; i < c.num_sources; ++i) {
    src.push_back(Normal(rng, c.num_tokens * c.dim, 1.0f + i));  // differing scales
    ptrs.push_back(src.back().data());
  }
  // w_proj ~ 1/sqrt(d) keeps z of order one: a non-degenerate softmax.
  const std::vector<float> w_norm = Normal(rng, c.dim, 1.0f);
  const std::vector<float> w_proj = Normal(rng, c.dim, 1.0f / std::sqrt(float(c.dim)));
  std::vector<float> out(static_cast<size_t>(c.num_tokens * c.dim)), ref(out.size());
  AttnResMix(ptrs, c.num_tokens, c.dim, w_norm.data(), w_proj.data(), 1e-5f, out.data());
  AttnResMixReference(ptrs.data(), c.num_sources, c.num_tokens, c.dim, w_norm.data(), w_proj.data(),
                      1e-5f, ref.data());
  for (int64_t e = 0; e < c.num_tokens * c.dim; ++e) {
    double scale = 0;
    for (const auto& s : src) scale = std::max(scale, std::fabs(double(s[e])));
    ASSERT_LE(std::fabs(double(out[e]) - ref[e]), kTol * scale + 1e-7)
        << isa << " sources " << c.num_sources << " tokens " << c.num_tokens << " dim " << c.dim
        << " element " << e;
  }
}

TEST(CpuAttnResTest, MatchesReferenceOnOddSizesOnEveryIsa) {
  const Case cases[] = {
      {1, 1, 1},    {2, 1, 7},  {3, 3, 16},    {2, 5, 17},  {9, 2, 97},
      {5, 1, 1000}, {9, 3, 31}, {4, 33, 1000}, {2, 7, 7168}};  // 33·1000·4: OpenMP
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(3);
    for (const Case& c : cases) CheckCase(c, rng, IsaName(isa));
  }
}

TEST(CpuAttnResTest, OneSourceOrEqualSourcesGiveThatSource) {
  for (Isa isa : SupportedIsas()) {
    IsaCap cap(isa);
    std::mt19937 rng(4);
    const int64_t tokens = 3, dim = 37;
    const std::vector<float> v = Normal(rng, tokens * dim, 2.0f), wn = Normal(rng, dim, 1.0f),
                             wp = Normal(rng, dim, 1.0f);
    std::vector<float> out(v.size());
    const float* one[] = {v.data()};
    AttnResMix(one, tokens, dim, wn.data(), wp.data(), 1e-5f, out.data());
    EXPECT_EQ(out, v) << IsaName(isa);  // softmax of one logit is exactly 1
    const float* three[] = {v.data(), v.data(), v.data()};
    AttnResMix(three, tokens, dim, wn.data(), wp.data(), 1e-5f, out.data());
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_NEAR(out[i], v[i], 1e-6 * std::fabs(v[i]) + 1e-7) << IsaName(isa) << " " << i;
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cpu
