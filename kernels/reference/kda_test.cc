// KDA core: the chunkwise form (kda_chunk.h) against the recurrence (kda_decode.h), state
// carry across calls, and hand-computed steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/reference/internal/test_util.h"
#include "kernels/reference/kda_chunk.h"
#include "kernels/reference/kda_decode.h"
#include "kernels/reference/kda_gate.h"
#include "kernels/reference/l2_norm.h"

namespace strata::kernels {
namespace {

using testing::AllClose;
using testing::AllFinite;
using testing::MaxAbs;
using testing::Rng;

enum class Gate { kLowerBound, kKimiLinear, kHarsh };

const char* GateName(Gate g) {
  switch (g) {
    case Gate::kLowerBound:
      return "K3 lower-bound";
    case Gate::kKimiLinear:
      return "Kimi-Linear";
    case Gate::kHarsh:
      return "harsh";
  }
  return "?";
}

struct KdaInputs {
  int64_t tokens;
  int heads;
  int dim;
  std::vector<float> q, k, v, g, beta, state0;
};

struct KdaResult {
  std::vector<float> o, state;
};

std::vector<float> MakeGate(Rng& rng, Gate kind, int64_t tokens, int heads, int dim) {
  const int64_t n = tokens * heads * dim;
  if (kind == Gate::kHarsh) {  // unbounded, down to −30 per step and a few −50 spikes
    std::vector<float> g = rng.Uniform(n, -30.0f, 0.0f);
    for (int64_t i = 0; i < n; i += 7) g[i] = -50.0f;
    for (int64_t i = 3; i < n; i += 11) g[i] = -1e-3f;
    return g;
  }
  const std::vector<float> f = rng.Normal(n, 1.5f);
  const std::vector<float> dt_bias = rng.Normal(heads * dim, 0.5f);
  std::vector<float> a_log = rng.Uniform(heads, 0.0f, static_cast<float>(std::log(16.0)));
  std::vector<float> g(n);
  KdaGateReference(f.data(), tokens, heads, dim, a_log.data(), dt_bias.data(),
                   kind == Gate::kLowerBound, -5.0f, g.data());
  return g;
}

KdaInputs MakeInputs(Rng& rng, int64_t tokens, int heads, int dim, Gate gate) {
  KdaInputs in{tokens,
               heads,
               dim,
               rng.Normal(tokens * heads * dim),
               rng.Normal(tokens * heads * dim),
               rng.Normal(tokens * heads * dim),
               MakeGate(rng, gate, tokens, heads, dim),
               {},
               rng.Normal(static_cast<int64_t>(heads) * dim * dim, 0.5f)};
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dim));
  L2NormReference(in.q.data(), tokens * heads, dim, 1e-6f, q_scale, in.q.data());
  L2NormReference(in.k.data(), tokens * heads, dim, 1e-6f, 1.0f, in.k.data());
  const std::vector<float> b = rng.Normal(tokens * heads, 2.0f);
  in.beta.resize(b.size());
  SigmoidReference(b.data(), static_cast<int64_t>(b.size()), in.beta.data());
  return in;
}

// Runs tokens [t0, t1) from `state` (updated in place) with the recurrent form (chunk = 0) or
// the chunk form; returns o of those tokens.
std::vector<float> RunRange(const KdaInputs& in, int64_t t0, int64_t t1, int chunk,
                            std::vector<float>& state) {
  const int64_t w = static_cast<int64_t>(in.heads) * in.dim;
  std::vector<float> o((t1 - t0) * w);
  const float* q = in.q.data() + t0 * w;
  const float* k = in.k.data() + t0 * w;
  const float* v = in.v.data() + t0 * w;
  const float* g = in.g.data() + t0 * w;
  const float* beta = in.beta.data() + t0 * in.heads;
  if (chunk == 0) {
    KdaRecurrentReference(q, k, v, g, beta, t1 - t0, in.heads, in.dim, state.data(), o.data());
  } else {
    KdaChunkReference(q, k, v, g, beta, t1 - t0, in.heads, in.dim, chunk, state.data(), o.data());
  }
  return o;
}

KdaResult RunKda(const KdaInputs& in, int chunk) {
  KdaResult r{{}, in.state0};
  r.o = RunRange(in, 0, in.tokens, chunk, r.state);
  return r;
}

// Relative comparison of whole tensors: |a − b| ≤ 1e-5·|b| + 1e-6·max(1, max|b|). Both forms
// keep f64 internally, so they agree to f32 rounding (measured: identical f32 outputs); the
// margin leaves room for f32-internal variants.
::testing::AssertionResult Close(const std::vector<float>& actual,
                                 const std::vector<float>& expected) {
  return AllClose(actual, expected, 1e-5, 1e-6 * std::max(1.0, MaxAbs(expected)));
}

// Head dim 2, one head, S0 = [[1, 0], [0, 2]] (S[i][j], i key channel).
// Step 1: α = [0.5, 1] → S = [[0.5, 0], [0, 2]]; k = [1, 0], v = [3, 5], β = 0.5:
//   e = v − Sᵀk = [2.5, 5]; S += 0.5·k eᵀ → [[1.75, 2.5], [0, 2]]; q = [1, 1] → o = [1.75, 4.5].
// Step 2: α = [1, 0.5] → S = [[1.75, 2.5], [0, 1]]; k = [0, 1], v = [1, 1], β = 1:
//   e = [1, 1] − [0, 1] = [1, 0]; S → [[1.75, 2.5], [1, 1]]; q = [1, −1] → o = [0.75, 1.5].
TEST(KdaReferenceTest, HandComputedTwoStepsHeadDimTwo) {
  const float half = static_cast<float>(std::log(0.5));
  KdaInputs in{2,
               1,
               2,
               {1.0f, 1.0f, 1.0f, -1.0f},
               {1.0f, 0.0f, 0.0f, 1.0f},
               {3.0f, 5.0f, 1.0f, 1.0f},
               {half, 0.0f, 0.0f, half},
               {0.5f, 1.0f},
               {1.0f, 0.0f, 0.0f, 2.0f}};
  for (int chunk : {0, 1, 2, 16}) {
    const KdaResult r = RunKda(in, chunk);
    EXPECT_TRUE(AllClose(r.o, {1.75f, 4.5f, 0.75f, 1.5f}, 1e-6, 1e-6)) << "chunk " << chunk;
    EXPECT_TRUE(AllClose(r.state, {1.75f, 2.5f, 1.0f, 1.0f}, 1e-6, 1e-6)) << "chunk " << chunk;
  }
  KdaResult first{{}, in.state0};  // after step 1 alone
  first.o = RunRange(in, 0, 1, 0, first.state);
  EXPECT_TRUE(AllClose(first.state, {1.75f, 2.5f, 0.0f, 2.0f}, 1e-6, 1e-6));
}

TEST(KdaReferenceTest, ChunkFormEqualsRecurrentFormForAllGatesAndShapes) {
  Rng rng(30);
  for (Gate gate : {Gate::kLowerBound, Gate::kKimiLinear, Gate::kHarsh}) {
    for (int dim : {16, 32}) {
      for (int heads : {1, 2, 3}) {
        for (int64_t tokens : {1, 7, 16, 17, 63, 64, 65, 131}) {
          const KdaInputs in = MakeInputs(rng, tokens, heads, dim, gate);
          const KdaResult expected = RunKda(in, 0);
          ASSERT_TRUE(AllFinite(expected.o) && AllFinite(expected.state));
          for (int chunk : {16, 64}) {
            const KdaResult got = RunKda(in, chunk);
            EXPECT_TRUE(Close(got.o, expected.o))
                << GateName(gate) << " D=" << dim << " H=" << heads << " T=" << tokens
                << " C=" << chunk;
            EXPECT_TRUE(Close(got.state, expected.state))
                << GateName(gate) << " D=" << dim << " H=" << heads << " T=" << tokens
                << " C=" << chunk;
          }
        }
      }
    }
  }
}

TEST(KdaReferenceTest, OddChunkSizesAndHeadDimsMatchRecurrence) {
  Rng rng(31);
  for (int dim : {2, 24, 128}) {
    const KdaInputs in = MakeInputs(rng, 29, 2, dim, Gate::kKimiLinear);
    const KdaResult expected = RunKda(in, 0);
    for (int chunk : {1, 3, 5, 8, 29, 32}) {
      const KdaResult got = RunKda(in, chunk);
      EXPECT_TRUE(Close(got.o, expected.o)) << "D=" << dim << " C=" << chunk;
      EXPECT_TRUE(Close(got.state, expected.state)) << "D=" << dim << " C=" << chunk;
    }
  }
}

// prefill(T1 + T2) == prefill(T1) then prefill(T2) with the carried state.
TEST(KdaReferenceTest, SplitPrefillWithCarriedStateEqualsWholePrefill) {
  Rng rng(32);
  const int64_t tokens = 70;
  for (Gate gate : {Gate::kLowerBound, Gate::kKimiLinear}) {
    const KdaInputs in = MakeInputs(rng, tokens, 2, 16, gate);
    for (int chunk : {0, 16, 64}) {
      const KdaResult whole = RunKda(in, chunk);
      for (int64_t split : {1, 16, 17, 40, 69}) {
        std::vector<float> state = in.state0;
        std::vector<float> o = RunRange(in, 0, split, chunk, state);
        const std::vector<float> tail = RunRange(in, split, tokens, chunk, state);
        o.insert(o.end(), tail.begin(), tail.end());
        EXPECT_TRUE(Close(o, whole.o)) << GateName(gate) << " C=" << chunk << " split=" << split;
        EXPECT_TRUE(Close(state, whole.state))
            << GateName(gate) << " C=" << chunk << " split=" << split;
      }
    }
  }
}

// Chunked prefill of T−1 tokens, then one recurrent decode step == last row of the prefill of T.
TEST(KdaReferenceTest, DecodeAfterChunkPrefillEqualsLastRowOfLongerPrefill) {
  Rng rng(33);
  const int64_t tokens = 66;
  const KdaInputs in = MakeInputs(rng, tokens, 3, 32, Gate::kLowerBound);
  const int64_t w = 3 * 32;
  for (int chunk : {16, 64}) {
    const KdaResult full = RunKda(in, chunk);
    std::vector<float> state = in.state0;
    RunRange(in, 0, tokens - 1, chunk, state);
    const std::vector<float> step = RunRange(in, tokens - 1, tokens, 0, state);
    EXPECT_TRUE(Close(step, std::vector<float>(full.o.end() - w, full.o.end()))) << chunk;
    EXPECT_TRUE(Close(state, full.state)) << chunk;
  }
}

// g = −∞ (α = 0) wipes the state: both forms stay finite and agree, and everything from that
// token on equals a fresh run from a zero state.
TEST(KdaReferenceTest, FullResetGateIsWellDefined) {
  Rng rng(34);
  const int64_t tokens = 40, reset = 21;
  const int heads = 2, dim = 16;
  KdaInputs in = MakeInputs(rng, tokens, heads, dim, Gate::kKimiLinear);
  const int64_t w = heads * dim;
  std::fill(in.g.begin() + reset * w, in.g.begin() + (reset + 1) * w,
            -std::numeric_limits<float>::infinity());
  const KdaResult expected = RunKda(in, 0);
  std::vector<float> fresh_state(in.state0.size(), 0.0f);
  const std::vector<float> fresh = RunRange(in, reset, tokens, 0, fresh_state);
  EXPECT_TRUE(Close(std::vector<float>(expected.o.begin() + reset * w, expected.o.end()), fresh));
  for (int chunk : {16, 64}) {
    const KdaResult got = RunKda(in, chunk);
    ASSERT_TRUE(AllFinite(got.o) && AllFinite(got.state)) << chunk;
    EXPECT_TRUE(Close(got.o, expected.o)) << chunk;
    EXPECT_TRUE(Close(got.state, expected.state)) << chunk;
  }
}

TEST(KdaReferenceTest, ZeroBetaAndZeroGateLeaveStateUnchanged) {
  Rng rng(35);
  KdaInputs in = MakeInputs(rng, 9, 2, 16, Gate::kLowerBound);
  std::fill(in.g.begin(), in.g.end(), 0.0f);
  std::fill(in.beta.begin(), in.beta.end(), 0.0f);
  for (int chunk : {0, 16}) {
    const KdaResult r = RunKda(in, chunk);
    EXPECT_EQ(r.state, in.state0) << chunk;
    // o_t = S0ᵀ q_t
    for (int64_t t = 0; t < in.tokens; ++t) {
      for (int h = 0; h < in.heads; ++h) {
        for (int j = 0; j < in.dim; ++j) {
          double acc = 0.0;
          for (int i = 0; i < in.dim; ++i) {
            acc += double(in.state0[(h * in.dim + i) * in.dim + j]) *
                   in.q[(t * in.heads + h) * in.dim + i];
          }
          EXPECT_NEAR(r.o[(t * in.heads + h) * in.dim + j], acc, 1e-6);
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::kernels
