#include "kernels/reference/mla.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reference/internal/test_util.h"

namespace strata::kernels {
namespace {

using testing::AllClose;
using testing::Rng;

struct MlaCase {
  MlaDims dims;
  int64_t num_ctx;
  int64_t num_new;
};

struct MlaInputs {
  std::vector<float> q, latent, w_kvb;
};

int64_t QWidth(const MlaDims& d) { return d.qk_nope_head_dim + d.qk_rope_head_dim; }
int64_t LatentWidth(const MlaDims& d) { return d.kv_lora_rank + d.qk_rope_head_dim; }

MlaInputs RandomInputs(Rng& rng, const MlaCase& c) {
  const MlaDims& d = c.dims;
  return MlaInputs{rng.Normal(c.num_new * d.num_heads * QWidth(d)),
                   rng.Normal(c.num_ctx * LatentWidth(d)),
                   rng.Normal(static_cast<int64_t>(d.num_heads) *
                                  (d.qk_nope_head_dim + d.v_head_dim) * d.kv_lora_rank,
                              0.3f)};
}

std::vector<float> RunMla(bool absorbed, const MlaInputs& in, const MlaCase& c) {
  std::vector<float> o(c.num_new * c.dims.num_heads * c.dims.v_head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(QWidth(c.dims)));
  if (absorbed) {
    MlaAttentionAbsorbedReference(in.q.data(), in.latent.data(), c.num_ctx, c.num_new,
                                  in.w_kvb.data(), c.dims, scale, o.data());
  } else {
    MlaAttentionReference(in.q.data(), in.latent.data(), c.num_ctx, c.num_new, in.w_kvb.data(),
                          c.dims, scale, o.data());
  }
  return o;
}

// H = 1, dn = dr = dv = r = 1, scale 1. W_UK = 2, W_UV = 3. Context rows κ = [c ; k_pe]:
// κ0 = [1 ; 0], κ1 = [0.5 ; 1]. Query at position 1: q = [1 ; 0.5].
// Scores: s0 = 1·(2·1) + 0.5·0 = 2, s1 = 1·(2·0.5) + 0.5·1 = 1.5; values 3·c = [3, 1.5].
TEST(MlaReferenceTest, BothFormsMatchHandComputedSoftmax) {
  const MlaDims dims{1, 1, 1, 1, 1};
  const std::vector<float> latent = {1.0f, 0.0f, 0.5f, 1.0f};
  const std::vector<float> w_kvb = {2.0f, 3.0f};
  const std::vector<float> q = {1.0f, 0.5f};
  const double p0 = std::exp(2.0) / (std::exp(2.0) + std::exp(1.5));
  const double expected = p0 * 3.0 + (1.0 - p0) * 1.5;
  float o = 0.0f;
  MlaAttentionReference(q.data(), latent.data(), 2, 1, w_kvb.data(), dims, 1.0f, &o);
  EXPECT_FLOAT_EQ(o, expected);
  MlaAttentionAbsorbedReference(q.data(), latent.data(), 2, 1, w_kvb.data(), dims, 1.0f, &o);
  EXPECT_FLOAT_EQ(o, expected);
  // As a 2-token prefill, query 0 sees only κ0: o = 3·1.
  const std::vector<float> q2 = {7.0f, -3.0f, 1.0f, 0.5f};
  std::vector<float> o2(2);
  MlaAttentionReference(q2.data(), latent.data(), 2, 2, w_kvb.data(), dims, 1.0f, o2.data());
  EXPECT_FLOAT_EQ(o2[0], 3.0f);
  EXPECT_FLOAT_EQ(o2[1], expected);
}

const MlaCase kCases[] = {
    {{1, 16, 8, 16, 32}, 13, 13}, {{2, 16, 8, 16, 32}, 17, 5}, {{3, 16, 8, 16, 32}, 9, 1},
    {{2, 24, 0, 8, 16}, 7, 7},    {{3, 8, 16, 24, 40}, 31, 4}, {{1, 32, 16, 32, 64}, 1, 1},
};

TEST(MlaReferenceTest, AbsorbedEqualsNonAbsorbed) {
  Rng rng(20);
  for (const MlaCase& c : kCases) {
    const MlaInputs in = RandomInputs(rng, c);
    const std::vector<float> naive = RunMla(false, in, c);
    const std::vector<float> absorbed = RunMla(true, in, c);
    EXPECT_TRUE(AllClose(absorbed, naive, 1e-5, 1e-6))
        << "H=" << c.dims.num_heads << " ctx=" << c.num_ctx << " new=" << c.num_new;
  }
}

TEST(MlaReferenceTest, LaterContextRowsDoNotChangeEarlierQueries) {
  Rng rng(21);
  const MlaCase c{{2, 16, 8, 16, 32}, 12, 12};
  const MlaInputs in = RandomInputs(rng, c);
  for (bool absorbed : {false, true}) {
    const std::vector<float> before = RunMla(absorbed, in, c);
    MlaInputs changed = in;
    const int64_t row = 7, lat_w = LatentWidth(c.dims);
    for (int64_t i = 0; i < lat_w; ++i) changed.latent[row * lat_w + i] += 5.0f;
    const std::vector<float> after = RunMla(absorbed, changed, c);
    const int64_t out_w = c.dims.num_heads * c.dims.v_head_dim;
    for (int64_t t = 0; t < c.num_new; ++t) {
      const std::vector<float> a(before.begin() + t * out_w, before.begin() + (t + 1) * out_w);
      const std::vector<float> b(after.begin() + t * out_w, after.begin() + (t + 1) * out_w);
      if (t < row) {
        EXPECT_EQ(a, b) << "query " << t << " absorbed=" << absorbed;
      } else {
        EXPECT_NE(a, b) << "query " << t << " absorbed=" << absorbed;
      }
    }
  }
}

TEST(MlaReferenceTest, DecodeEqualsLastRowOfPrefill) {
  Rng rng(22);
  for (int heads : {1, 3}) {
    const MlaCase prefill{{heads, 16, 8, 16, 32}, 11, 11};
    const MlaInputs in = RandomInputs(rng, prefill);
    const MlaCase decode{prefill.dims, 11, 1};
    const int64_t q_row = heads * QWidth(prefill.dims);
    MlaInputs last = in;
    last.q.assign(in.q.end() - q_row, in.q.end());
    const int64_t out_w = heads * prefill.dims.v_head_dim;
    for (bool absorbed : {false, true}) {
      const std::vector<float> full = RunMla(absorbed, in, prefill);
      const std::vector<float> step = RunMla(absorbed, last, decode);
      EXPECT_EQ(step, std::vector<float>(full.end() - out_w, full.end())) << "H=" << heads;
    }
  }
}

TEST(MlaReferenceTest, UniformScoresAverageTheValues) {
  // q = 0 → every score 0 → o = mean_j (W_UV c_j) over the visible rows.
  Rng rng(23);
  const MlaCase c{{2, 16, 8, 16, 32}, 6, 6};
  MlaInputs in = RandomInputs(rng, c);
  std::fill(in.q.begin(), in.q.end(), 0.0f);
  const MlaDims& d = c.dims;
  std::vector<float> expected(c.num_new * d.num_heads * d.v_head_dim);
  for (int64_t t = 0; t < c.num_new; ++t) {
    for (int h = 0; h < d.num_heads; ++h) {
      for (int a = 0; a < d.v_head_dim; ++a) {
        const float* w_uv =
            in.w_kvb.data() + (static_cast<int64_t>(h) * (d.qk_nope_head_dim + d.v_head_dim) +
                               d.qk_nope_head_dim + a) *
                                  d.kv_lora_rank;
        double acc = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          for (int c2 = 0; c2 < d.kv_lora_rank; ++c2) {
            acc += static_cast<double>(w_uv[c2]) * in.latent[j * LatentWidth(d) + c2];
          }
        }
        expected[(t * d.num_heads + h) * d.v_head_dim + a] = static_cast<float>(acc / (t + 1));
      }
    }
  }
  EXPECT_TRUE(AllClose(RunMla(false, in, c), expected, 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(RunMla(true, in, c), expected, 1e-5, 1e-6));
}

}  // namespace
}  // namespace strata::kernels
