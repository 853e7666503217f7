// KdaPrefillChunked (chunked tensor-core KDA prefill, K3 gate) vs the kernels/reference chain
// ShortConvSilu → L2Norm → KdaGate/Sigmoid → KdaRecurrent → GatedRmsNorm run token by token on
// the host, and vs KdaPrefillRecurrent on the device: varlen batches whose lengths straddle the
// chunk of 16 (1, 2, 15, 16, 17, 31, 97, 300), an empty and a padding sequence, carried state
// and conv cache, K3-shaped heads, slow / fast / mixed decay, bf16 state and output; strided
// projection rows (also on the recurrent prefill and the decode step).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "kernels/cuda/kda_chunk.h"
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

struct ChunkCase {
  int heads;
  int conv_size;
  float lower_bound;
  float f_lo, f_hi;  // gate input range: high → g near lower_bound (fast decay), low → slow
  bool bf16_state;
  bool bf16_out;
  std::vector<int> lens;  // a 0 is an empty sequence; the last sequence is padding (slot −1)
};

std::string Name(const ChunkCase& c) {
  std::string name = absl::StrCat("H", c.heads, "_K", c.conv_size, "_lb", c.lower_bound, "_f",
                                  c.f_lo, "..", c.f_hi, c.bf16_state ? "_bf16state" : "_f32state",
                                  c.bf16_out ? "_bf16out" : "_f32out", "_lens");
  for (int len : c.lens) absl::StrAppend(&name, "_", len);
  return name;
}

struct Inputs {
  std::vector<float> qkv, f, b_raw, g_raw, conv_w, a_log, dt_bias, o_norm_w;
};

// Random layer parameters and projected rows for `tokens` tokens.
Inputs RandomInputs(const ChunkCase& tc, int tokens, std::mt19937& rng) {
  const int hd = tc.heads * kD, channels = 3 * hd;
  Inputs x;
  x.conv_w = Uniform(rng, static_cast<size_t>(channels) * tc.conv_size, -0.6f, 0.6f);
  x.a_log = Uniform(rng, tc.heads, -1.0f, 0.5f);
  x.dt_bias = Uniform(rng, hd, -1, 1);
  x.o_norm_w = Uniform(rng, kD, 0.5f, 1.5f);
  x.qkv = Uniform(rng, static_cast<size_t>(tokens) * channels, -2, 2);
  x.f = Uniform(rng, static_cast<size_t>(tokens) * hd, tc.f_lo, tc.f_hi);
  x.b_raw = Uniform(rng, static_cast<size_t>(tokens) * tc.heads, -3, 3);
  x.g_raw = Uniform(rng, static_cast<size_t>(tokens) * hd, -3, 3);
  return x;
}

// The kernels' parameters for `tc` over `batch` sequences (the K3 gate).
KdaDecodeParams ChunkParams(const ChunkCase& tc, int batch) {
  KdaDecodeParams params;
  params.batch = batch;
  params.num_heads = tc.heads;
  params.conv_size = tc.conv_size;
  params.has_lower_bound = true;
  params.lower_bound = tc.lower_bound;
  return params;
}

// The host reference for token t on state row `slot` (f32 state, carried in place).
void ReferenceToken(const ChunkCase& tc, const Inputs& x, int64_t t, int slot,
                    std::vector<float>& state, std::vector<float>& conv, std::vector<float>& y) {
  const int hd = tc.heads * kD, channels = 3 * hd;
  std::vector<float> conv_out(channels);
  ShortConvSiluReference(x.qkv.data() + t * channels, 1, channels, x.conv_w.data(), tc.conv_size,
                         conv.data() + static_cast<int64_t>(slot) * (tc.conv_size - 1) * channels,
                         conv_out.data());
  float* q = conv_out.data();
  float* k = q + hd;
  const float* v = k + hd;
  L2NormReference(q, tc.heads, kD, 1e-6f, 1.0f / std::sqrt(static_cast<float>(kD)), q);
  L2NormReference(k, tc.heads, kD, 1e-6f, 1.0f, k);
  std::vector<float> g(hd), beta(tc.heads), o(hd);
  KdaGateReference(x.f.data() + t * hd, 1, tc.heads, kD, x.a_log.data(), x.dt_bias.data(), true,
                   tc.lower_bound, g.data());
  SigmoidReference(x.b_raw.data() + t * tc.heads, tc.heads, beta.data());
  float* s = state.data() + static_cast<int64_t>(slot) * tc.heads * kD * kD;
  KdaRecurrentReference(q, k, v, g.data(), beta.data(), 1, tc.heads, kD, s, o.data());
  GatedRmsNormReference(o.data(), x.g_raw.data() + t * hd, 1, tc.heads, kD, x.o_norm_w.data(),
                        1e-5f, y.data() + t * hd);
}

void RunCase(const ChunkCase& tc, std::mt19937& rng) {
  const int seqs = static_cast<int>(tc.lens.size());
  const int hd = tc.heads * kD, channels = 3 * hd, rows = seqs + 2;
  std::vector<int32_t> cu = {0};
  for (int len : tc.lens) cu.push_back(cu.back() + len);
  const int tokens = cu.back();
  std::vector<int32_t> order(rows);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> slots(order.begin(), order.begin() + seqs);
  slots.back() = -1;

  std::vector<float> state =
      Uniform(rng, static_cast<size_t>(rows) * tc.heads * kD * kD, -0.3f, 0.3f);
  const std::vector<uint16_t> state_bits = ToBf16InPlace(state);  // both runs start from these
  std::vector<float> conv =
      Uniform(rng, static_cast<size_t>(rows) * (tc.conv_size - 1) * channels, -1, 1);
  const Inputs x = RandomInputs(tc, tokens, rng);

  DeviceArray<float> d_qkv(x.qkv), d_f(x.f), d_b(x.b_raw), d_g(x.g_raw), d_conv_w(x.conv_w),
      d_a_log(x.a_log), d_dt_bias(x.dt_bias), d_o_norm_w(x.o_norm_w);
  DeviceArray<int32_t> d_slots(slots), d_cu(cu);
  // Chunked run (state/conv "c") and recurrent run (state/conv "r") from the same start.
  DeviceArray<float> d_state_c(state), d_state_r(state), d_conv_c(conv), d_conv_r(conv);
  DeviceArray<uint16_t> d_state_bits_c(state_bits), d_state_bits_r(state_bits);
  DeviceArray<float> d_y_f32(static_cast<size_t>(tokens) * hd);
  DeviceArray<uint16_t> d_y_bf16(static_cast<size_t>(tokens) * hd), d_y_rec(d_y_bf16.size());
  DeviceArray<float> d_y_rec_f32(d_y_f32.size());
  d_y_f32.Poison();
  d_y_bf16.Poison();
  d_y_rec.Poison();
  d_y_rec_f32.Poison();

  std::vector<float> y_ref(static_cast<size_t>(tokens) * hd, 0.0f);
  for (int n = 0; n < seqs; ++n) {
    if (slots[n] < 0) continue;
    for (int t = cu[n]; t < cu[n + 1]; ++t) ReferenceToken(tc, x, t, slots[n], state, conv, y_ref);
    if (tc.bf16_state) {  // the device rounds the state once, at the end of the sequence
      const int64_t per_slot = static_cast<int64_t>(tc.heads) * kD * kD;
      for (int64_t i = slots[n] * per_slot; i < (slots[n] + 1) * per_slot; ++i) {
        state[i] = Bf16ToF32(F32ToBf16(state[i]));
      }
    }
  }

  const KdaDecodeInputs in =
      KdaDeviceInputs(d_qkv, d_f, d_b, d_g, d_conv_w, d_a_log, d_dt_bias, d_o_norm_w, d_slots);
  const KdaDecodeParams params = ChunkParams(tc, seqs);
  if (tc.bf16_state) {
    if (tc.bf16_out) {
      STRATA_ASSERT_OK(KdaPrefillChunkedBf16State(in, d_cu.get(), d_state_bits_c.get(),
                                                  d_conv_c.get(), params, d_y_bf16.get(), nullptr));
    } else {
      STRATA_ASSERT_OK(KdaPrefillChunkedBf16State(in, d_cu.get(), d_state_bits_c.get(),
                                                  d_conv_c.get(), params, d_y_f32.get(), nullptr));
    }
    STRATA_ASSERT_OK(KdaPrefillRecurrentBf16State(in, d_cu.get(), d_state_bits_r.get(),
                                                  d_conv_r.get(), params, d_y_rec.get(), nullptr));
  } else {
    if (tc.bf16_out) {
      STRATA_ASSERT_OK(KdaPrefillChunked(in, d_cu.get(), d_state_c.get(), d_conv_c.get(), params,
                                         d_y_bf16.get(), nullptr));
      STRATA_ASSERT_OK(KdaPrefillRecurrent(in, d_cu.get(), d_state_r.get(), d_conv_r.get(), params,
                                           d_y_rec.get(), nullptr));
    } else {
      STRATA_ASSERT_OK(KdaPrefillChunked(in, d_cu.get(), d_state_c.get(), d_conv_c.get(), params,
                                         d_y_f32.get(), nullptr));
      STRATA_ASSERT_OK(KdaPrefillRecurrent(in, d_cu.get(), d_state_r.get(), d_conv_r.get(), params,
                                           d_y_rec_f32.get(), nullptr));
    }
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // bf16 tensor-core operands (S, decayed q/k, U in the state update): ~2^-9 relative per
  // product term; the state itself stays f32.
  const std::string name = Name(tc);
  const bool bf16_y = tc.bf16_out;
  const double y_tol = bf16_y ? 1.5e-2 : 1e-2;
  const double s_tol = tc.bf16_state ? 1.5e-2 : 1e-2;
  const std::vector<float> y = bf16_y ? FromBf16(d_y_bf16.Download()) : d_y_f32.Download();
  STRATA_EXPECT_RELERR("KdaPrefillChunked_y", name, y, y_ref, y_tol);
  const std::vector<float> s =
      tc.bf16_state ? FromBf16(d_state_bits_c.Download()) : d_state_c.Download();
  STRATA_EXPECT_RELERR("KdaPrefillChunked_state", name, s, state, s_tol);
  // The conv cache only moves input values around: exact, and equal to the recurrent kernel's.
  const std::vector<float> conv_c = d_conv_c.Download();
  EXPECT_EQ(conv_c, conv) << name;
  EXPECT_EQ(conv_c, d_conv_r.Download()) << name;

  // Against the recurrent kernel on the device (its y is bf16 whenever the state is bf16).
  const bool rec_bf16_y = tc.bf16_state || tc.bf16_out;
  const std::vector<float> y_rec =
      rec_bf16_y ? FromBf16(d_y_rec.Download()) : d_y_rec_f32.Download();
  STRATA_EXPECT_RELERR("KdaPrefillChunked_vs_recurrent_y", name, y, y_rec,
                       rec_bf16_y ? 1.5e-2 : 1e-2);
  const std::vector<float> s_rec =
      tc.bf16_state ? FromBf16(d_state_bits_r.Download()) : d_state_r.Download();
  STRATA_EXPECT_RELERR("KdaPrefillChunked_vs_recurrent_state", name, s, s_rec, s_tol);
}

TEST(CudaKdaChunkTest, VarlenPrefillMatchesReferenceAndRecurrentKernel) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 31);
  const std::vector<int> lens = {1, 2, 15, 16, 0, 17, 31, 97, 300, 5};
  const std::vector<ChunkCase> cases = {
      // K3's heads over fewer tokens (the emulator's cost is heads x tokens)
      {96, 4, -5.0f, -3.0f, 3.0f, false, false, {1, 15, 0, 17, 97, 5}},
      {3, 4, -5.0f, -10.0f, -6.0f, false, true, lens},       // slow decay: long memory
      {2, 1, -7.5f, 6.0f, 10.0f, true, false, lens},         // at the bound: spans ≈ 120
      {4, 2, -5.0f, -3.0f, 3.0f, true, true, {300, 16, 3}},  // bf16 state and output
      {5, 3, -2.0f, -6.0f, 2.0f, false, false, {33, 1, 64, 2}},
  };
  for (const ChunkCase& tc : cases) {
    RunCase(tc, rng);
    if (HasFatalFailure()) return;
  }
}

// Strided projection rows, as the CUDA model passes them (one GEMM's [q|k|v|b|pad|g] rows):
// the chunked and recurrent prefills and the decode step give bit for bit what dense rows give.
TEST(CudaKdaChunkTest, StridedProjectionRowsGiveTheDenseResult) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 35);
  const ChunkCase tc{3, 4, -5.0f, -3.0f, 3.0f, false, true, {17, 1, 5}};
  const int hd = tc.heads * kD, channels = 3 * hd, seqs = 3;
  const std::vector<int32_t> cu = {0, 17, 18, 23}, slots = {2, 0, 1};
  const int tokens = cu.back();
  const Inputs x = RandomInputs(tc, tokens, rng);
  // b at column 3·H·D, g at the next multiple of 4, rows of ld floats.
  const int64_t b_col = channels, g_col = b_col + (tc.heads + 3) / 4 * 4, ld = g_col + hd;
  std::vector<float> packed(static_cast<size_t>(tokens * ld), 99.0f);
  for (int t = 0; t < tokens; ++t) {
    std::copy_n(x.qkv.begin() + t * channels, channels, packed.begin() + t * ld);
    std::copy_n(x.b_raw.begin() + t * tc.heads, tc.heads, packed.begin() + t * ld + b_col);
    std::copy_n(x.g_raw.begin() + t * hd, hd, packed.begin() + t * ld + g_col);
  }
  const std::vector<float> state =
      Uniform(rng, static_cast<size_t>(seqs) * tc.heads * kD * kD, -0.3f, 0.3f);
  const std::vector<float> conv =
      Uniform(rng, static_cast<size_t>(seqs) * (tc.conv_size - 1) * channels, -1, 1);
  DeviceArray<float> d_qkv(x.qkv), d_f(x.f), d_b(x.b_raw), d_g(x.g_raw), d_conv_w(x.conv_w),
      d_a_log(x.a_log), d_dt_bias(x.dt_bias), d_o_norm_w(x.o_norm_w), d_packed(packed);
  DeviceArray<int32_t> d_slots(slots), d_cu(cu);
  const KdaDecodeInputs dense =
      KdaDeviceInputs(d_qkv, d_f, d_b, d_g, d_conv_w, d_a_log, d_dt_bias, d_o_norm_w, d_slots);
  KdaDecodeInputs strided = dense;
  strided.qkv_raw = d_packed.get();
  strided.b_raw = d_packed.get() + b_col;
  strided.g_raw = d_packed.get() + g_col;
  strided.qkv_stride = strided.b_stride = strided.g_stride = ld;
  const KdaDecodeParams params = ChunkParams(tc, seqs);
  // form 0: chunked prefill, 1: recurrent prefill, 2: the decode step on the first 3 tokens.
  for (int form = 0; form < 3; ++form) {
    std::vector<std::vector<float>> out;  // y, state, conv of the dense run, then the strided
    for (const KdaDecodeInputs* in : {&dense, static_cast<const KdaDecodeInputs*>(&strided)}) {
      DeviceArray<float> d_state(state), d_conv(conv);
      DeviceArray<uint16_t> d_y(static_cast<size_t>(tokens) * hd);
      d_y.Poison();
      if (form == 0) {
        STRATA_ASSERT_OK(KdaPrefillChunked(*in, d_cu.get(), d_state.get(), d_conv.get(), params,
                                           d_y.get(), nullptr));
      } else if (form == 1) {
        STRATA_ASSERT_OK(KdaPrefillRecurrent(*in, d_cu.get(), d_state.get(), d_conv.get(), params,
                                             d_y.get(), nullptr));
      } else {
        STRATA_ASSERT_OK(
            KdaDecodeStep(*in, d_state.get(), d_conv.get(), params, d_y.get(), nullptr));
      }
      const int rows = form == 2 ? seqs : tokens;
      std::vector<float> y = FromBf16(d_y.Download());
      y.resize(static_cast<size_t>(rows) * hd);
      out.push_back(y);
      out.push_back(d_state.Download());
      out.push_back(d_conv.Download());
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(out[static_cast<size_t>(i)], out[static_cast<size_t>(i + 3)])
          << "form " << form
          << (i == 0   ? " y"
              : i == 1 ? " state"
                       : " conv");
    }
  }
  KdaDecodeInputs odd = strided;
  odd.qkv_stride = ld + 1;  // rows no longer 16-byte aligned: the chunked form refuses
  DeviceArray<float> d_state(state), d_conv(conv);
  DeviceArray<uint16_t> d_y(static_cast<size_t>(tokens) * hd);
  const absl::Status refused =
      KdaPrefillChunked(odd, d_cu.get(), d_state.get(), d_conv.get(), params, d_y.get(), nullptr);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("qkv_stride"), std::string::npos) << refused;
}

// Speculative decoding on both multi-token kernels: a verifying run (update_caches = false)
// gives the updating run's y bit for bit and leaves the state and conv rows untouched; a replay
// of the kept part of each sequence (seq_ends) then advances the caches by exactly those tokens
// (reference chain, token by token).
TEST(CudaKdaChunkTest, VerifyingRunKeepsTheCachesAndSeqEndsReplayTheKeptTokens) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 37);
  const ChunkCase tc{2, 4, -5.0f, -3.0f, 3.0f, false, false, {5, 17, 2}};
  const std::vector<int32_t> cu = {0, 5, 22, 24}, kept = {3, 17, 1}, slots = {2, 0, 3};
  const int hd = tc.heads * kD, channels = 3 * hd, rows = 4, tokens = cu.back();
  std::vector<float> state =
      Uniform(rng, static_cast<size_t>(rows) * tc.heads * kD * kD, -0.3f, 0.3f);
  std::vector<float> conv =
      Uniform(rng, static_cast<size_t>(rows) * (tc.conv_size - 1) * channels, -1, 1);
  const Inputs x = RandomInputs(tc, tokens, rng);
  std::vector<float> want_state = state, want_conv = conv, y_ref(static_cast<size_t>(tokens) * hd);
  std::vector<int32_t> ends;
  for (size_t n = 0; n < slots.size(); ++n) {
    ends.push_back(cu[n] + kept[n]);
    for (int t = cu[n]; t < ends.back(); ++t) {
      ReferenceToken(tc, x, t, slots[n], want_state, want_conv, y_ref);
    }
  }
  DeviceArray<float> d_qkv(x.qkv), d_f(x.f), d_b(x.b_raw), d_g(x.g_raw), d_conv_w(x.conv_w),
      d_a_log(x.a_log), d_dt_bias(x.dt_bias), d_o_norm_w(x.o_norm_w);
  DeviceArray<int32_t> d_slots(slots), d_cu(cu), d_ends(ends);
  KdaDecodeInputs in =
      KdaDeviceInputs(d_qkv, d_f, d_b, d_g, d_conv_w, d_a_log, d_dt_bias, d_o_norm_w, d_slots);
  KdaDecodeParams params = ChunkParams(tc, 3);
  for (const bool chunked : {true, false}) {
    const std::string name = chunked ? "chunked" : "recurrent";
    auto run = [&](const KdaDecodeInputs& i, const KdaDecodeParams& p, DeviceArray<float>& s,
                   DeviceArray<float>& c, DeviceArray<float>& y) {
      return chunked ? KdaPrefillChunked(i, d_cu.get(), s.get(), c.get(), p, y.get(), nullptr)
                     : KdaPrefillRecurrent(i, d_cu.get(), s.get(), c.get(), p, y.get(), nullptr);
    };
    DeviceArray<float> d_state(state), d_conv(conv), d_y(y_ref.size()), d_y_verify(y_ref.size());
    d_y.Poison();
    d_y_verify.Poison();
    KdaDecodeParams verify = params;
    verify.update_caches = false;
    STRATA_ASSERT_OK(run(in, verify, d_state, d_conv, d_y_verify));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_state.Download(), state) << name << ": a verifying run wrote the state";
    EXPECT_EQ(d_conv.Download(), conv) << name << ": a verifying run wrote the conv cache";
    DeviceArray<float> d_state_u(state), d_conv_u(conv);
    STRATA_ASSERT_OK(run(in, params, d_state_u, d_conv_u, d_y));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_y_verify.Download(), d_y.Download()) << name;

    KdaDecodeInputs replay = in;
    replay.seq_ends = d_ends.get();
    STRATA_ASSERT_OK(run(replay, params, d_state, d_conv, d_y));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    STRATA_EXPECT_RELERR("KdaReplay_state", name, d_state.Download(), want_state, 1e-2);
    EXPECT_EQ(d_conv.Download(), want_conv) << name;
  }
}

// Argument checks return before any CUDA call, so this runs without a device.
TEST(CudaKdaChunkTest, RejectsUnsupportedGatesAndShapes) {
  std::vector<float> dummy(64, 0.0f);
  std::vector<int32_t> ints(4, 0);
  KdaDecodeInputs in;
  in.qkv_raw = in.f = in.b_raw = in.g_raw = in.conv_w = in.a_log = in.dt_bias = in.o_norm_w =
      dummy.data();
  in.slots = ints.data();
  KdaDecodeParams ok;
  ok.batch = 0;
  ok.num_heads = 2;
  ok.has_lower_bound = true;
  ok.lower_bound = -5.0f;
  float* state = dummy.data();
  float* conv = dummy.data();
  float* y = dummy.data();
  EXPECT_TRUE(KdaPrefillChunked(in, ints.data(), state, conv, ok, y, nullptr).ok());

  auto expect_invalid = [&](const KdaDecodeParams& p, const int32_t* cu, const char* what) {
    const absl::Status st = KdaPrefillChunked(in, cu, state, conv, p, y, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what << ": " << st;
  };
  KdaDecodeParams p = ok;
  p.has_lower_bound = false;  // Kimi-Linear's unbounded gate
  expect_invalid(p, ints.data(), "unbounded gate");
  {
    const absl::Status st = KdaPrefillChunked(in, ints.data(), state, conv, p, y, nullptr);
    EXPECT_NE(st.message().find("-7.5"), std::string::npos) << st;  // names the limit
  }
  p = ok;
  p.lower_bound = -7.6f;
  expect_invalid(p, ints.data(), "lower_bound below the limit");
  p.lower_bound = 0.0f;
  expect_invalid(p, ints.data(), "lower_bound 0");
  p.lower_bound = NAN;
  expect_invalid(p, ints.data(), "lower_bound NaN");
  p = ok;
  p.head_dim = 64;
  expect_invalid(p, ints.data(), "head_dim 64");
  p = ok;
  p.conv_size = 5;
  expect_invalid(p, ints.data(), "conv_size 5");
  p.conv_size = 0;
  expect_invalid(p, ints.data(), "conv_size 0");
  p = ok;
  p.num_heads = 0;
  expect_invalid(p, ints.data(), "no heads");
  p = ok;
  p.batch = -1;
  expect_invalid(p, ints.data(), "negative batch");
  p.batch = 65536;
  expect_invalid(p, ints.data(), "batch > 65535");
  p = ok;
  p.batch = 1;
  expect_invalid(p, nullptr, "null cu_seqlens");
  KdaDecodeInputs misaligned = in;
  misaligned.qkv_raw = dummy.data() + 1;  // 4-byte aligned only
  const absl::Status st = KdaPrefillChunked(misaligned, ints.data(), state, conv, p, y, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

}  // namespace
}  // namespace strata::kernels::cuda
