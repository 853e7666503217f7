#include "kernels/reference/short_conv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reference/internal/test_util.h"

namespace strata::kernels {
namespace {

using testing::Rng;

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

TEST(ShortConvSiluReferenceTest, HandComputedFromZeroState) {
  // C = 2, K = 4; w[c] = taps for x_{t−3}, x_{t−2}, x_{t−1}, x_t.
  const std::vector<float> w = {1.0f, 2.0f, 3.0f, 4.0f,  //
                                0.5f, 0.0f, 0.0f, -1.0f};
  const std::vector<float> x = {1.0f, 2.0f,   // t = 0
                                2.0f, -1.0f,  // t = 1
                                3.0f, 4.0f};  // t = 2
  std::vector<float> state(3 * 2, 0.0f);
  std::vector<float> y(6);
  ShortConvSiluReference(x.data(), 3, 2, w.data(), 4, state.data(), y.data());
  EXPECT_FLOAT_EQ(y[0], Silu(4 * 1));
  EXPECT_FLOAT_EQ(y[2], Silu(3 * 1 + 4 * 2));
  EXPECT_FLOAT_EQ(y[4], Silu(2 * 1 + 3 * 2 + 4 * 3));
  EXPECT_FLOAT_EQ(y[1], Silu(-1 * 2));
  EXPECT_FLOAT_EQ(y[3], Silu(-1 * -1));
  EXPECT_FLOAT_EQ(y[5], Silu(-1 * 4));  // 0.5 multiplies the zero state row
  EXPECT_EQ(state, x);                  // the last K−1 = 3 pre-conv inputs
}

TEST(ShortConvSiluReferenceTest, HandComputedFromCarriedState) {
  const std::vector<float> w = {1.0f, 2.0f, 3.0f, 4.0f,  //
                                0.5f, 0.0f, 0.0f, -1.0f};
  std::vector<float> state = {10.0f, 7.0f,  // oldest
                              20.0f, 0.0f,  //
                              30.0f, 1.0f};
  const std::vector<float> x = {1.0f, 1.0f};
  std::vector<float> y(2);
  ShortConvSiluReference(x.data(), 1, 2, w.data(), 4, state.data(), y.data());
  EXPECT_FLOAT_EQ(y[0], Silu(1 * 10 + 2 * 20 + 3 * 30 + 4 * 1));
  EXPECT_FLOAT_EQ(y[1], Silu(0.5 * 7 - 1 * 1));
  EXPECT_EQ(state, (std::vector<float>{20.0f, 0.0f, 30.0f, 1.0f, 1.0f, 1.0f}));
}

TEST(ShortConvSiluReferenceTest, KernelSizeOneHasNoState) {
  const std::vector<float> w = {2.0f, -1.0f};
  const std::vector<float> x = {1.0f, 3.0f, -2.0f, 0.5f};
  std::vector<float> y(4);
  ShortConvSiluReference(x.data(), 2, 2, w.data(), 1, nullptr, y.data());
  EXPECT_FLOAT_EQ(y[0], Silu(2.0));
  EXPECT_FLOAT_EQ(y[1], Silu(-3.0));
  EXPECT_FLOAT_EQ(y[2], Silu(-4.0));
  EXPECT_FLOAT_EQ(y[3], Silu(-0.5));
}

// conv(x[0:T]) == conv(x[0:a]) then conv(x[a:T]) with the carried cache, for every split a,
// and == T single-token steps (decode).
TEST(ShortConvSiluReferenceTest, SplitWithCarriedStateEqualsWholeSequence) {
  Rng rng(8);
  const int64_t channels = 13, tokens = 11;
  for (int kernel : {2, 3, 4}) {
    const std::vector<float> w = rng.Normal(channels * kernel);
    const std::vector<float> x = rng.Normal(tokens * channels);
    const std::vector<float> state0 = rng.Normal((kernel - 1) * channels);
    std::vector<float> state_whole = state0, y_whole(tokens * channels);
    ShortConvSiluReference(x.data(), tokens, channels, w.data(), kernel, state_whole.data(),
                           y_whole.data());
    for (int64_t a = 0; a <= tokens; ++a) {
      std::vector<float> state = state0, y(tokens * channels);
      ShortConvSiluReference(x.data(), a, channels, w.data(), kernel, state.data(), y.data());
      ShortConvSiluReference(x.data() + a * channels, tokens - a, channels, w.data(), kernel,
                             state.data(), y.data() + a * channels);
      EXPECT_EQ(y, y_whole) << "K=" << kernel << " a=" << a;
      EXPECT_EQ(state, state_whole) << "K=" << kernel << " a=" << a;
    }
    std::vector<float> state = state0, y(tokens * channels);
    for (int64_t t = 0; t < tokens; ++t) {
      ShortConvSiluReference(x.data() + t * channels, 1, channels, w.data(), kernel, state.data(),
                             y.data() + t * channels);
    }
    EXPECT_EQ(y, y_whole) << "token by token, K=" << kernel;
    EXPECT_EQ(state, state_whole);
  }
}

}  // namespace
}  // namespace strata::kernels
