#include "kernels/reference/attn_res.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reference/internal/test_util.h"

namespace strata::kernels {
namespace {

using testing::AllClose;
using testing::AllFinite;
using testing::Rng;

TEST(AttnResMixReferenceTest, OneSourceIsTheIdentity) {
  Rng rng(13);
  const int64_t tokens = 3, dim = 29;
  const std::vector<float> v = rng.Normal(tokens * dim, 4.0f);
  const std::vector<float> w_norm = rng.Normal(dim), w_proj = rng.Normal(dim);
  const float* sources[] = {v.data()};
  std::vector<float> out(v.size());
  AttnResMixReference(sources, 1, tokens, dim, w_norm.data(), w_proj.data(), 1e-5f, out.data());
  EXPECT_EQ(out, v);
}

TEST(AttnResMixReferenceTest, TwoSourcesHandComputed) {
  // d = 2, w_eff = [1, 0.5]. v0 = [1, 1]: mean² 1, z0 = 1.5. v1 = [2, 0]: mean² 2, z1 = √2.
  const std::vector<float> v0 = {1.0f, 1.0f}, v1 = {2.0f, 0.0f};
  const std::vector<float> w_norm = {2.0f, 1.0f}, w_proj = {0.5f, 0.5f};
  const float* sources[] = {v0.data(), v1.data()};
  std::vector<float> out(2);
  AttnResMixReference(sources, 2, 1, 2, w_norm.data(), w_proj.data(), 0.0f, out.data());
  const double e0 = std::exp(1.5), e1 = std::exp(std::sqrt(2.0));
  const double p0 = e0 / (e0 + e1), p1 = e1 / (e0 + e1);
  EXPECT_FLOAT_EQ(out[0], p0 * 1.0 + p1 * 2.0);
  EXPECT_FLOAT_EQ(out[1], p0 * 1.0);
}

TEST(AttnResMixReferenceTest, EpsEntersTheKeyNorm) {
  const std::vector<float> v0 = {1.0f, 1.0f}, v1 = {2.0f, 0.0f};
  const std::vector<float> w_norm = {2.0f, 1.0f}, w_proj = {0.5f, 0.5f};
  const float* sources[] = {v0.data(), v1.data()};
  std::vector<float> out(2);
  AttnResMixReference(sources, 2, 1, 2, w_norm.data(), w_proj.data(), 1.0f, out.data());
  const double e0 = std::exp(1.5 / std::sqrt(2.0)), e1 = std::exp(2.0 / std::sqrt(3.0));
  EXPECT_FLOAT_EQ(out[1], e0 / (e0 + e1));
}

// Sources with disjoint supports let the test read each softmax weight back out of `out`.
TEST(AttnResMixReferenceTest, WeightsArePositiveAndSumToOne) {
  Rng rng(14);
  for (int num_sources : {2, 3, 9}) {
    const int64_t dim = 2 * num_sources + 3, tokens = 4;
    std::vector<std::vector<float>> v(num_sources, std::vector<float>(tokens * dim, 0.0f));
    for (int i = 0; i < num_sources; ++i) {
      for (int64_t t = 0; t < tokens; ++t) {
        v[i][t * dim + 2 * i] = 1.0f + static_cast<float>(i);
        v[i][t * dim + 2 * i + 1] = rng.Normal(1, 3.0f)[0];
      }
    }
    std::vector<const float*> sources;
    for (const auto& s : v) sources.push_back(s.data());
    const std::vector<float> w_norm = rng.Normal(dim), w_proj = rng.Normal(dim);
    std::vector<float> out(tokens * dim);
    AttnResMixReference(sources.data(), num_sources, tokens, dim, w_norm.data(), w_proj.data(),
                        1e-5f, out.data());
    for (int64_t t = 0; t < tokens; ++t) {
      double sum = 0.0;
      for (int i = 0; i < num_sources; ++i) {
        const double weight = out[t * dim + 2 * i] / (1.0 + i);
        EXPECT_GT(weight, 0.0);
        EXPECT_LT(weight, 1.0);
        sum += weight;
      }
      EXPECT_NEAR(sum, 1.0, 1e-6) << "sources " << num_sources;
    }
  }
}

TEST(AttnResMixReferenceTest, IdenticalSourcesMixToThemselvesAndLargeLogitsAreSafe) {
  Rng rng(15);
  const int64_t tokens = 2, dim = 17;
  const std::vector<float> v = rng.Normal(tokens * dim);
  const float* same[] = {v.data(), v.data(), v.data()};
  const std::vector<float> w_norm = rng.Normal(dim), w_proj = rng.Normal(dim);
  std::vector<float> out(v.size());
  AttnResMixReference(same, 3, tokens, dim, w_norm.data(), w_proj.data(), 1e-5f, out.data());
  EXPECT_TRUE(AllClose(out, v, 1e-6, 1e-7));
  // Huge query: softmax saturates on the best source without overflow.
  const std::vector<float> a(dim, 1.0f), b(dim, -1.0f), big(dim, 1e4f), ones(dim, 1.0f);
  const float* two[] = {a.data(), b.data()};
  std::vector<float> out1(dim);
  AttnResMixReference(two, 2, 1, dim, big.data(), ones.data(), 1e-5f, out1.data());
  EXPECT_TRUE(AllFinite(out1));
  EXPECT_EQ(out1, a);
}

}  // namespace
}  // namespace strata::kernels
