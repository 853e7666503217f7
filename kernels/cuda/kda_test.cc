// KDA fused decode step on the GPU vs the kernels/reference chain ShortConvSilu → L2Norm →
// KdaGate/Sigmoid → KdaRecurrent → GatedRmsNorm, over several steps with carried state.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "kernels/cuda/kda_decode.h"
#include "kernels/cuda/kda_testing.h"
#include "kernels/cuda/testing.h"
#include "kernels/reference/gated_rms_norm.h"
#include "kernels/reference/kda_decode.h"
#include "kernels/reference/kda_gate.h"
#include "kernels/reference/l2_norm.h"
#include "kernels/reference/short_conv.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::FromBf16;
using testing::KdaDeviceInputs;
using testing::TestSeed;
using testing::ToBf16InPlace;
using testing::Uniform;

constexpr int kD = kKdaHeadDim;

struct KdaCase {
  int batch;
  int heads;
  int conv_size;
  bool k3_gate;  // lower-bounded gate (K3) vs Kimi-Linear's unbounded one
  bool bf16_state;
  bool bf16_out;
  int steps;
};

std::string Name(const KdaCase& c) {
  return absl::StrCat("B", c.batch, "_H", c.heads, "_K", c.conv_size,
                      c.k3_gate ? "_k3gate" : "_klgate", c.bf16_state ? "_bf16state" : "_f32state",
                      c.bf16_out ? "_bf16out" : "_f32out");
}

// One reference decode step for batch row b on state row `slot`.
void ReferenceStep(const KdaCase& tc, const std::vector<float>& qkv, const std::vector<float>& f,
                   const std::vector<float>& b_raw, const std::vector<float>& g_raw,
                   const std::vector<float>& conv_w, const std::vector<float>& a_log,
                   const std::vector<float>& dt_bias, const std::vector<float>& o_norm_w, int b,
                   int slot, std::vector<float>& state, std::vector<float>& conv,
                   std::vector<float>& y) {
  const int hd = tc.heads * kD, channels = 3 * hd;
  std::vector<float> x(qkv.begin() + static_cast<int64_t>(b) * channels,
                       qkv.begin() + static_cast<int64_t>(b + 1) * channels);
  std::vector<float> conv_out(channels);
  ShortConvSiluReference(x.data(), 1, channels, conv_w.data(), tc.conv_size,
                         conv.data() + static_cast<int64_t>(slot) * (tc.conv_size - 1) * channels,
                         conv_out.data());
  float* q = conv_out.data();
  float* k = q + hd;
  const float* v = k + hd;
  L2NormReference(q, tc.heads, kD, 1e-6f, 1.0f / std::sqrt(static_cast<float>(kD)), q);
  L2NormReference(k, tc.heads, kD, 1e-6f, 1.0f, k);
  std::vector<float> g(hd), beta(tc.heads), o(hd);
  KdaGateReference(f.data() + static_cast<int64_t>(b) * hd, 1, tc.heads, kD, a_log.data(),
                   dt_bias.data(), tc.k3_gate, -5.0f, g.data());
  SigmoidReference(b_raw.data() + static_cast<int64_t>(b) * tc.heads, tc.heads, beta.data());
  float* s = state.data() + static_cast<int64_t>(slot) * tc.heads * kD * kD;
  KdaRecurrentReference(q, k, v, g.data(), beta.data(), 1, tc.heads, kD, s, o.data());
  if (tc.bf16_state) {  // the device stores the state rounded to bf16 after each step
    for (int64_t i = 0; i < static_cast<int64_t>(tc.heads) * kD * kD; ++i) {
      s[i] = Bf16ToF32(F32ToBf16(s[i]));
    }
  }
  GatedRmsNormReference(o.data(), g_raw.data() + static_cast<int64_t>(b) * hd, 1, tc.heads, kD,
                        o_norm_w.data(), 1e-5f, y.data() + static_cast<int64_t>(b) * hd);
}

void RunCase(const KdaCase& tc, std::mt19937& rng) {
  const int hd = tc.heads * kD, channels = 3 * hd;
  const int rows = tc.batch + 2;  // spare state rows nobody uses
  // Batch row b uses a shuffled slot; with batch ≥ 2 the last row is padding (slot −1).
  std::vector<int32_t> order(rows);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> slots(order.begin(), order.begin() + tc.batch);
  if (tc.batch >= 2) slots.back() = -1;

  std::vector<float> state =
      Uniform(rng, static_cast<size_t>(rows) * tc.heads * kD * kD, -0.3f, 0.3f);
  std::vector<uint16_t> state_bits = ToBf16InPlace(state);  // bf16 case starts from these
  std::vector<float> conv =
      Uniform(rng, static_cast<size_t>(rows) * (tc.conv_size - 1) * channels, -1, 1);
  const std::vector<float> conv_w =
      Uniform(rng, static_cast<size_t>(channels) * tc.conv_size, -0.6f, 0.6f);
  const std::vector<float> a_log = Uniform(rng, tc.heads, -1.0f, 0.5f);
  const std::vector<float> dt_bias = Uniform(rng, hd, -1, 1);
  const std::vector<float> o_norm_w = Uniform(rng, kD, 0.5f, 1.5f);

  DeviceArray<float> d_state_f32(state), d_conv(conv), d_conv_w(conv_w), d_a_log(a_log),
      d_dt_bias(dt_bias), d_o_norm_w(o_norm_w);
  DeviceArray<uint16_t> d_state_bf16(state_bits);
  DeviceArray<int32_t> d_slots(slots);
  DeviceArray<float> d_y_f32(static_cast<size_t>(tc.batch) * hd);
  DeviceArray<uint16_t> d_y_bf16(static_cast<size_t>(tc.batch) * hd);

  KdaDecodeParams params;
  params.batch = tc.batch;
  params.num_heads = tc.heads;
  params.conv_size = tc.conv_size;
  params.has_lower_bound = tc.k3_gate;
  params.lower_bound = -5.0f;
  for (int step = 0; step < tc.steps; ++step) {
    const std::vector<float> qkv = Uniform(rng, static_cast<size_t>(tc.batch) * channels, -2, 2);
    const std::vector<float> f = Uniform(rng, static_cast<size_t>(tc.batch) * hd, -3, 3);
    const std::vector<float> b_raw = Uniform(rng, static_cast<size_t>(tc.batch) * tc.heads, -3, 3);
    const std::vector<float> g_raw = Uniform(rng, static_cast<size_t>(tc.batch) * hd, -3, 3);
    std::vector<float> y_ref(static_cast<size_t>(tc.batch) * hd, 0.0f);
    for (int b = 0; b < tc.batch; ++b) {
      if (slots[b] < 0) continue;
      ReferenceStep(tc, qkv, f, b_raw, g_raw, conv_w, a_log, dt_bias, o_norm_w, b, slots[b], state,
                    conv, y_ref);
    }
    DeviceArray<float> d_qkv(qkv), d_f(f), d_b(b_raw), d_g(g_raw);
    const KdaDecodeInputs in =
        KdaDeviceInputs(d_qkv, d_f, d_b, d_g, d_conv_w, d_a_log, d_dt_bias, d_o_norm_w, d_slots);
    d_y_f32.Poison();
    d_y_bf16.Poison();
    if (tc.bf16_state && tc.bf16_out) {
      STRATA_ASSERT_OK(KdaDecodeStepBf16State(in, d_state_bf16.get(), d_conv.get(), params,
                                              d_y_bf16.get(), nullptr));
    } else if (tc.bf16_state) {
      STRATA_ASSERT_OK(KdaDecodeStepBf16State(in, d_state_bf16.get(), d_conv.get(), params,
                                              d_y_f32.get(), nullptr));
    } else if (tc.bf16_out) {
      STRATA_ASSERT_OK(
          KdaDecodeStep(in, d_state_f32.get(), d_conv.get(), params, d_y_bf16.get(), nullptr));
    } else {
      STRATA_ASSERT_OK(
          KdaDecodeStep(in, d_state_f32.get(), d_conv.get(), params, d_y_f32.get(), nullptr));
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::string name = absl::StrCat(Name(tc), "_step", step);
    const double tol = (tc.bf16_state || tc.bf16_out) ? 5e-3 : 1e-4;
    const std::vector<float> y = tc.bf16_out ? FromBf16(d_y_bf16.Download()) : d_y_f32.Download();
    STRATA_EXPECT_RELERR("KdaDecodeStep_y", name, y, y_ref, tol);
    const std::vector<float> s =
        tc.bf16_state ? FromBf16(d_state_bf16.Download()) : d_state_f32.Download();
    STRATA_EXPECT_RELERR("KdaDecodeStep_state", name, s, state, tc.bf16_state ? 5e-3 : 1e-5);
    // The conv cache only moves input values around: exact.
    ASSERT_EQ(d_conv.Download(), conv) << name;
  }
}

TEST(CudaKdaDecodeTest, MatchesReferenceChainOverSteps) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 2);
  const std::vector<KdaCase> cases = {
      {1, 1, 4, true, false, false, 3},
      {3, 5, 4, false, false, false, 3},
      {4, 3, 2, true, true, false, 4},
      {2, 2, 4, false, true, true, 3},
      {5, 7, 1, true, false, true, 2},
      {2, 96, 4, true, false, false, 2},
      {3, 32, 4, false, true, false, 2},
      // More (sequence, head) items than the persistent grid's CTAs (2 per SM: 264 on the
      // emulator): CTAs take two or three items, the next one's state staged during the current
      // one, padding items among them.
      {9, 64, 4, false, false, false, 2},
      {7, 48, 3, true, true, false, 1},
  };
  for (const KdaCase& tc : cases) {
    RunCase(tc, rng);
    if (HasFatalFailure()) return;
  }
}

// Varlen prefill (KdaPrefillRecurrent): sequences of different lengths, an empty one and a
// padding one, against the reference run token by token.
void RunPrefill(const KdaCase& tc, const std::vector<int>& lens, std::mt19937& rng) {
  const int seqs = static_cast<int>(lens.size());
  const int hd = tc.heads * kD, channels = 3 * hd;
  const int rows = seqs + 1;
  std::vector<int32_t> cu = {0};
  for (int len : lens) cu.push_back(cu.back() + len);
  const int tokens = cu.back();
  std::vector<int32_t> order(rows);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> slots(order.begin(), order.begin() + seqs);
  slots.back() = -1;  // the last sequence is padding

  std::vector<float> state =
      Uniform(rng, static_cast<size_t>(rows) * tc.heads * kD * kD, -0.3f, 0.3f);
  std::vector<uint16_t> state_bits = ToBf16InPlace(state);
  std::vector<float> conv =
      Uniform(rng, static_cast<size_t>(rows) * (tc.conv_size - 1) * channels, -1, 1);
  const std::vector<float> conv_w =
      Uniform(rng, static_cast<size_t>(channels) * tc.conv_size, -0.6f, 0.6f);
  const std::vector<float> a_log = Uniform(rng, tc.heads, -1.0f, 0.5f);
  const std::vector<float> dt_bias = Uniform(rng, hd, -1, 1);
  const std::vector<float> o_norm_w = Uniform(rng, kD, 0.5f, 1.5f);
  const std::vector<float> qkv = Uniform(rng, static_cast<size_t>(tokens) * channels, -2, 2);
  const std::vector<float> f = Uniform(rng, static_cast<size_t>(tokens) * hd, -3, 3);
  const std::vector<float> b_raw = Uniform(rng, static_cast<size_t>(tokens) * tc.heads, -3, 3);
  const std::vector<float> g_raw = Uniform(rng, static_cast<size_t>(tokens) * hd, -3, 3);

  DeviceArray<float> d_state_f32(state), d_conv(conv), d_conv_w(conv_w), d_a_log(a_log),
      d_dt_bias(dt_bias), d_o_norm_w(o_norm_w), d_qkv(qkv), d_f(f), d_b(b_raw), d_g(g_raw);
  DeviceArray<uint16_t> d_state_bf16(state_bits);
  DeviceArray<int32_t> d_slots(slots), d_cu(cu);
  DeviceArray<float> d_y_f32(static_cast<size_t>(tokens) * hd);
  DeviceArray<uint16_t> d_y_bf16(static_cast<size_t>(tokens) * hd);
  d_y_f32.Poison();
  d_y_bf16.Poison();

  // The device keeps the state in f32 registers over a whole sequence and rounds a bf16 state
  // once at the end: so does the reference here.
  KdaCase ref_tc = tc;
  ref_tc.bf16_state = false;
  std::vector<float> y_ref(static_cast<size_t>(tokens) * hd, 0.0f);
  for (int n = 0; n < seqs; ++n) {
    if (slots[n] < 0) continue;
    for (int t = cu[n]; t < cu[n + 1]; ++t) {
      ReferenceStep(ref_tc, qkv, f, b_raw, g_raw, conv_w, a_log, dt_bias, o_norm_w, t, slots[n],
                    state, conv, y_ref);
    }
    if (tc.bf16_state) {
      const int64_t per_slot = static_cast<int64_t>(tc.heads) * kD * kD;
      for (int64_t i = slots[n] * per_slot; i < (slots[n] + 1) * per_slot; ++i) {
        state[i] = Bf16ToF32(F32ToBf16(state[i]));
      }
    }
  }
  const KdaDecodeInputs in =
      KdaDeviceInputs(d_qkv, d_f, d_b, d_g, d_conv_w, d_a_log, d_dt_bias, d_o_norm_w, d_slots);
  KdaDecodeParams params;
  params.batch = seqs;
  params.num_heads = tc.heads;
  params.conv_size = tc.conv_size;
  params.has_lower_bound = tc.k3_gate;
  if (tc.bf16_state) {
    STRATA_ASSERT_OK(KdaPrefillRecurrentBf16State(in, d_cu.get(), d_state_bf16.get(), d_conv.get(),
                                                  params, d_y_bf16.get(), nullptr));
  } else if (tc.bf16_out) {
    STRATA_ASSERT_OK(KdaPrefillRecurrent(in, d_cu.get(), d_state_f32.get(), d_conv.get(), params,
                                         d_y_bf16.get(), nullptr));
  } else {
    STRATA_ASSERT_OK(KdaPrefillRecurrent(in, d_cu.get(), d_state_f32.get(), d_conv.get(), params,
                                         d_y_f32.get(), nullptr));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::string name = absl::StrCat(Name(tc), "_lens");
  for (int len : lens) absl::StrAppend(&name, "_", len);
  const bool bf16_y = tc.bf16_state || tc.bf16_out;
  const std::vector<float> y = bf16_y ? FromBf16(d_y_bf16.Download()) : d_y_f32.Download();
  STRATA_EXPECT_RELERR("KdaPrefillRecurrent_y", name, y, y_ref, bf16_y ? 5e-3 : 2e-4);
  const std::vector<float> s =
      tc.bf16_state ? FromBf16(d_state_bf16.Download()) : d_state_f32.Download();
  STRATA_EXPECT_RELERR("KdaPrefillRecurrent_state", name, s, state, tc.bf16_state ? 5e-3 : 2e-5);
  ASSERT_EQ(d_conv.Download(), conv) << name;
}

TEST(CudaKdaDecodeTest, VarlenPrefillMatchesTokenByTokenReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 10);
  const std::vector<int> lens = {1, 0, 7, 40, 129, 3};
  const int seqs = static_cast<int>(lens.size());
  const std::vector<KdaCase> cases = {
      {seqs, 3, 4, true, false, false, 1},   {seqs, 2, 4, false, false, true, 1},
      {seqs, 1, 2, false, false, false, 1},  {seqs, 4, 4, true, true, false, 1},
      {seqs, 50, 4, false, false, false, 1},  // 300 items: some CTAs take two
  };
  for (const KdaCase& tc : cases) {
    RunPrefill(tc, lens, rng);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
