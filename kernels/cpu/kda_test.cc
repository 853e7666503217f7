// The fused KDA kernels (KdaDecode, KdaPrefill, KdaChunk) against the f64-accumulating
// references in kernels/reference, on every ISA path this CPU has (AVX-512 and AVX2; the AVX2
// path is forced with SetIsaOverride).
//
// Errors are normwise: max |x − x_ref| / max |x_ref| over an output (the final state, o), and
// for y per (token, head) row with the row's conditioning (FirstBadOutputRow). Both kernels
// compute in f32 with sums over ≤ 128 terms; the chunk form adds f64-cumulated decays rounded
// once to f32. The largest error seen over all cases below is 9e-7 (both ISAs); kTolerance =
// 1e-5 leaves 10× headroom and is far below what a wrong or missing term gives (≥ 1e-3). The
// conv cache is copied, never computed, so it must match exactly.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/kda_chunk.h"
#include "kernels/cpu/kda_decode.h"
#include "kernels/cpu/kda_layer.h"
#include "kernels/cpu/kda_simd.h"
#include "kernels/reference/gated_rms_norm.h"
#include "kernels/reference/kda_decode.h"
#include "kernels/reference/kda_gate.h"
#include "kernels/reference/l2_norm.h"
#include "kernels/reference/short_conv.h"

namespace strata::kernels::cpu {
namespace {

constexpr double kTolerance = 1e-5;
constexpr int kConvKernel = 4;

enum class Gate { kBounded, kUnbounded, kUnboundedLarge };

std::string GateName(Gate g) {
  switch (g) {
    case Gate::kBounded:
      return "bounded";
    case Gate::kUnbounded:
      return "unbounded";
    case Gate::kUnboundedLarge:
      return "unbounded-large";
  }
  return "?";
}

class Rng {
 public:
  explicit Rng(uint32_t seed) : engine_(seed) {}
  std::vector<float> Normal(int64_t count, float mean = 0.0f, float stddev = 1.0f) {
    std::normal_distribution<float> dist(mean, stddev);
    std::vector<float> out(static_cast<size_t>(count));
    for (float& v : out) v = dist(engine_);
    return out;
  }

 private:
  std::mt19937 engine_;
};

// One KDA layer's parameters. Large gates: the bounded gate sits at its −5 floor for many
// channels (f·e^A_log ≫ 0), the large unbounded one decays by up to ~e^-200 per token.
struct Layer {
  int heads = 0, dim = 0;
  Gate gate = Gate::kBounded;
  std::vector<float> q_conv, k_conv, v_conv, a_log, dt_bias, o_norm;

  int64_t width() const { return int64_t{heads} * dim; }
  KdaLayerParams Params() const {
    KdaLayerParams p;
    p.num_heads = heads;
    p.head_dim = dim;
    p.conv_kernel_size = kConvKernel;
    p.q_conv = q_conv.data();
    p.k_conv = k_conv.data();
    p.v_conv = v_conv.data();
    p.a_log = a_log.data();
    p.dt_bias = dt_bias.data();
    p.has_gate_lower_bound = gate == Gate::kBounded;
    p.gate_lower_bound = gate == Gate::kBounded ? -5.0f : 0.0f;
    p.o_norm = o_norm.data();
    return p;
  }
};

Layer MakeLayer(int heads, int dim, Gate gate, Rng& rng) {
  Layer l{heads, dim, gate};
  const int64_t p = l.width();
  l.q_conv = rng.Normal(p * kConvKernel, 0.0f, 0.6f);
  l.k_conv = rng.Normal(p * kConvKernel, 0.0f, 0.6f);
  l.v_conv = rng.Normal(p * kConvKernel, 0.0f, 0.6f);
  l.a_log = rng.Normal(heads, gate == Gate::kUnboundedLarge ? 3.0f : 0.0f, 1.0f);
  l.dt_bias = rng.Normal(p, gate == Gate::kUnboundedLarge ? 2.0f : 0.0f, 1.0f);
  l.o_norm = rng.Normal(dim, 1.0f, 0.2f);
  return l;
}

// A ragged batch: projected rows of all sequences plus each sequence's caches.
struct Batch {
  std::vector<int64_t> lengths;
  int64_t num_rows = 0;
  std::vector<float> q, k, v, f, b, gate;
  std::vector<std::vector<float>> state, conv;

  std::vector<KdaSequence> Sequences() {
    std::vector<KdaSequence> seqs;
    int64_t offset = 0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      seqs.push_back({offset, lengths[i], state[i].data(), conv[i].data()});
      offset += lengths[i];
    }
    return seqs;
  }
  KdaRows Rows() const { return {q.data(), k.data(), v.data(), f.data(), b.data(), gate.data()}; }
};

Batch MakeBatch(const Layer& l, const std::vector<int64_t>& lengths, Rng& rng) {
  Batch batch;
  batch.lengths = lengths;
  for (int64_t t : lengths) batch.num_rows += t;
  const int64_t n = batch.num_rows * l.width();
  batch.q = rng.Normal(n);
  batch.k = rng.Normal(n);
  batch.v = rng.Normal(n);
  batch.f = rng.Normal(n, 0.0f, l.gate == Gate::kUnbounded ? 1.0f : 4.0f);
  batch.b = rng.Normal(batch.num_rows * l.heads);
  batch.gate = rng.Normal(n);
  for (size_t i = 0; i < lengths.size(); ++i) {
    batch.state.push_back(rng.Normal(int64_t{l.heads} * l.dim * l.dim, 0.0f, 0.3f));
    batch.conv.push_back(rng.Normal(3 * (kConvKernel - 1) * l.width()));
  }
  return batch;
}

// The layer step of one sequence composed from the reference ops (as engine/kda_mixer.cc did).
// `o` (optional, [t, P]) receives the recurrence output before the gated RMS norm.
void ReferenceStep(const Layer& l, const Batch& batch, int64_t row0, int64_t t, float* state,
                   float* conv, float* y, std::vector<float>* o_out = nullptr) {
  const int64_t p = l.width(), at = row0 * p;
  const size_t n = static_cast<size_t>(t * p);
  std::vector<float> q(n), k(n), v(n), g(n), o(n), beta(static_cast<size_t>(t * l.heads));
  const int64_t conv_stride = (kConvKernel - 1) * p;
  ShortConvSiluReference(batch.q.data() + at, t, p, l.q_conv.data(), kConvKernel, conv, q.data());
  ShortConvSiluReference(batch.k.data() + at, t, p, l.k_conv.data(), kConvKernel,
                         conv + conv_stride, k.data());
  ShortConvSiluReference(batch.v.data() + at, t, p, l.v_conv.data(), kConvKernel,
                         conv + 2 * conv_stride, v.data());
  L2NormReference(q.data(), t * l.heads, l.dim, 1e-6f, 1.0f / std::sqrt(float(l.dim)), q.data());
  L2NormReference(k.data(), t * l.heads, l.dim, 1e-6f, 1.0f, k.data());
  const KdaLayerParams params = l.Params();
  KdaGateReference(batch.f.data() + at, t, l.heads, l.dim, l.a_log.data(), l.dt_bias.data(),
                   params.has_gate_lower_bound, params.gate_lower_bound, g.data());
  SigmoidReference(batch.b.data() + row0 * l.heads, t * l.heads, beta.data());
  KdaRecurrentReference(q.data(), k.data(), v.data(), g.data(), beta.data(), t, l.heads, l.dim,
                        state, o.data());
  if (o_out != nullptr) *o_out = o;
  GatedRmsNormReference(o.data(), batch.gate.data() + at, t, l.heads, l.dim, l.o_norm.data(),
                        params.o_norm_eps, y);
}

double MaxAbs(const float* x, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(double{x[i]}));
  return m;
}

// y = RMSNorm(o)·w·σ(gate) rescales every (token, head) row by 1/rms(o_row), so an error of
// ε·max|o| in o (normwise over the sequence) becomes ε·max|o|·|w|/rms(o_row) in y: large where a
// row's o is small by cancellation (frequent with D = 1). Checks every row of y against
// kTolerance · (max|y_ref| + max|o_ref|·max|w| / rms(o_ref_row)); returns the first failing row.
int64_t FirstBadOutputRow(const float* y, const float* y_ref, const std::vector<float>& o_ref,
                          int64_t num_rows, int dim, double max_weight) {
  const int64_t n = num_rows * dim;
  const double max_y = MaxAbs(y_ref, n), max_o = MaxAbs(o_ref.data(), n);
  for (int64_t r = 0; r < num_rows; ++r) {
    double sum_sq = 0.0, err = 0.0;
    for (int64_t c = 0; c < dim; ++c) {
      sum_sq += double{o_ref[r * dim + c]} * o_ref[r * dim + c];
      err = std::max(err, std::abs(double{y[r * dim + c]} - y_ref[r * dim + c]));
    }
    const double rms = std::sqrt(sum_sq / dim + 1e-5);
    if (err > kTolerance * (max_y + max_o * max_weight / rms)) return r;
  }
  return -1;
}

double NormwiseError(const float* x, const float* ref, int64_t n) {
  double max_err = 0.0, max_ref = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    max_err = std::max(max_err, std::abs(double{x[i]} - ref[i]));
    max_ref = std::max(max_ref, std::abs(double{ref[i]}));
  }
  return max_ref > 0.0 ? max_err / max_ref : max_err;
}

// Runs `kernel` on the whole batch and the reference per sequence; compares y, state, conv.
template <typename Kernel>
void ExpectBatchMatchesReference(const Layer& l, Batch batch, Kernel kernel,
                                 const std::string& what) {
  Batch ref = batch;
  std::vector<float> y(static_cast<size_t>(batch.num_rows * l.width()), -7.0f);
  std::vector<float> y_ref(y.size());
  std::vector<KdaSequence> seqs = batch.Sequences();
  kernel(l.Params(), seqs, batch.Rows(), y.data());
  int64_t row0 = 0;
  for (size_t s = 0; s < batch.lengths.size(); ++s) {
    const int64_t t = batch.lengths[s], p = l.width();
    std::vector<float> o_ref;
    ReferenceStep(l, ref, row0, t, ref.state[s].data(), ref.conv[s].data(), y_ref.data() + row0 * p,
                  &o_ref);
    const std::string where = what + " seq " + std::to_string(s) + " T=" + std::to_string(t);
    EXPECT_EQ(FirstBadOutputRow(y.data() + row0 * p, y_ref.data() + row0 * p, o_ref, t * l.heads,
                                l.dim, MaxAbs(l.o_norm.data(), l.dim)),
              -1)
        << where << " (y row (token·H + head) out of tolerance)";
    EXPECT_LE(NormwiseError(batch.state[s].data(), ref.state[s].data(),
                            static_cast<int64_t>(ref.state[s].size())),
              kTolerance)
        << where << " (state)";
    EXPECT_EQ(batch.conv[s], ref.conv[s]) << where << " (conv cache)";
    row0 += t;
  }
}

std::string Describe(const Layer& l, Isa isa) {
  return std::string(IsaName(isa)) + " H=" + std::to_string(l.heads) +
         " D=" + std::to_string(l.dim) + " gate=" + GateName(l.gate);
}

class IsaCap {
 public:
  explicit IsaCap(Isa isa) { SetIsaOverride(isa); }
  ~IsaCap() { ClearIsaOverride(); }
  IsaCap(const IsaCap&) = delete;
  IsaCap& operator=(const IsaCap&) = delete;
};

bool IsaAvailable(Isa isa) {
  ClearIsaOverride();
  return ActiveIsa() >= isa;
}

class KdaCpuTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!IsaAvailable(GetParam())) GTEST_SKIP() << IsaName(GetParam()) << " not on this CPU";
    cap_.emplace(GetParam());
    ASSERT_EQ(ActiveIsa(), GetParam());
  }
  void TearDown() override { cap_.reset(); }

 private:
  std::optional<IsaCap> cap_;
};

constexpr int kDims[] = {1, 7, 13, 64, 128};
constexpr int kHeads[] = {1, 3};
constexpr Gate kGates[] = {Gate::kBounded, Gate::kUnbounded, Gate::kUnboundedLarge};

TEST_P(KdaCpuTest, DecodeOfABatchMatchesTheReferencePerSequenceOnOddShapes) {
  Rng rng(11);
  for (int dim : kDims) {
    for (int heads : kHeads) {
      for (Gate gate : kGates) {
        const Layer l = MakeLayer(heads, dim, gate, rng);
        for (int num_seqs = 1; num_seqs <= 5; num_seqs += 2) {
          const Batch batch = MakeBatch(l, std::vector<int64_t>(num_seqs, 1), rng);
          ExpectBatchMatchesReference(
              l, batch,
              [](const KdaLayerParams& p, const std::vector<KdaSequence>& seqs, const KdaRows& rows,
                 float* y) {
                KdaDecode(p, seqs.data(), static_cast<int64_t>(seqs.size()), rows, y);
              },
              Describe(l, GetParam()) + " decode batch " + std::to_string(num_seqs));
        }
      }
    }
  }
}

TEST_P(KdaCpuTest, PrefillOfARaggedBatchMatchesTheReferencePerSequence) {
  Rng rng(12);
  const std::vector<int64_t> lengths = {1, 2, 17, 63, 64, 65, 130};
  for (int dim : kDims) {
    for (int heads : kHeads) {
      for (Gate gate : kGates) {
        const Layer l = MakeLayer(heads, dim, gate, rng);
        const Batch batch = MakeBatch(l, lengths, rng);
        for (int chunk : {16, 32, 64}) {
          ExpectBatchMatchesReference(
              l, batch,
              [chunk](const KdaLayerParams& p, const std::vector<KdaSequence>& seqs,
                      const KdaRows& rows, float* y) {
                KdaPrefill(p, seqs.data(), static_cast<int64_t>(seqs.size()), rows, chunk, y);
              },
              Describe(l, GetParam()) + " prefill chunk " + std::to_string(chunk));
        }
      }
    }
  }
}

// g per channel class: 0 (no decay), small, the K3 floor −5, strong, and extreme (e^-1000 per
// token: the factorised form would overflow, the pairwise fallback must take over).
TEST_P(KdaCpuTest, ChunkFormEqualsTheRecurrenceForExtremeGates) {
  Rng rng(13);
  const float classes[] = {0.0f, -0.02f, -5.0f, -40.0f, -1000.0f};
  for (int dim : {5, 64, 128}) {
    const int heads = 2;
    for (int64_t t : {1, 16, 33, 130}) {
      const int64_t p = int64_t{heads} * dim, n = t * p;
      std::vector<float> q = rng.Normal(n), k = rng.Normal(n), v = rng.Normal(n);
      std::vector<float> beta = rng.Normal(t * heads), g = rng.Normal(n);
      for (float& b : beta) b = 0.2f + 0.6f / (1.0f + std::exp(b));
      for (int64_t i = 0; i < n; ++i) {
        const float noise = std::abs(g[static_cast<size_t>(i)]);
        g[static_cast<size_t>(i)] = classes[(i % dim) % 5] * (1.0f + 0.1f * noise);
      }
      for (int64_t r = 0; r < t * heads; ++r) {  // L2-normalised rows, q scaled by D^-1/2
        L2NormReference(q.data() + r * dim, 1, dim, 1e-6f, 1.0f / std::sqrt(float(dim)),
                        q.data() + r * dim);
        L2NormReference(k.data() + r * dim, 1, dim, 1e-6f, 1.0f, k.data() + r * dim);
      }
      const std::vector<float> state0 = rng.Normal(int64_t{heads} * dim * dim);
      std::vector<float> state_ref = state0, o_ref(static_cast<size_t>(n));
      KdaRecurrentReference(q.data(), k.data(), v.data(), g.data(), beta.data(), t, heads, dim,
                            state_ref.data(), o_ref.data());
      for (int chunk : {16, 64}) {
        std::vector<float> state = state0, o(static_cast<size_t>(n));
        KdaChunk(q.data(), k.data(), v.data(), g.data(), beta.data(), t, heads, dim, chunk,
                 state.data(), o.data());
        const std::string where = std::string(IsaName(GetParam())) + " D=" + std::to_string(dim) +
                                  " T=" + std::to_string(t) + " chunk=" + std::to_string(chunk);
        EXPECT_LE(NormwiseError(o.data(), o_ref.data(), n), kTolerance) << where << " (o)";
        EXPECT_LE(NormwiseError(state.data(), state_ref.data(), int64_t{heads} * dim * dim),
                  kTolerance)
            << where << " (state)";
      }
    }
  }
}

// A sequence's outputs and caches are bit-identical alone and inside a batch, and with one or
// two threads (each (sequence, head) runs on one thread in a fixed order).
TEST_P(KdaCpuTest, ResultsDoNotDependOnTheBatchOrTheThreadCount) {
  Rng rng(14);
  const Layer l = MakeLayer(3, 64, Gate::kUnbounded, rng);
  for (bool decode : {true, false}) {
    const std::vector<int64_t> lengths =
        decode ? std::vector<int64_t>{1, 1, 1, 1} : std::vector<int64_t>{40, 3, 17, 70};
    Batch batch = MakeBatch(l, lengths, rng);
    Batch alone = batch;
    auto run = [&](Batch& b, std::vector<KdaSequence> seqs, float* y) {
      if (decode) {
        KdaDecode(l.Params(), seqs.data(), static_cast<int64_t>(seqs.size()), b.Rows(), y);
      } else {
        KdaPrefill(l.Params(), seqs.data(), static_cast<int64_t>(seqs.size()), b.Rows(),
                   kKdaDefaultChunkSize, y);
      }
    };
    std::vector<float> y(static_cast<size_t>(batch.num_rows * l.width()));
    std::vector<float> y_alone(y.size());
    run(batch, batch.Sequences(), y.data());
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<KdaSequence> all = alone.Sequences();
    for (const KdaSequence& seq : all) run(alone, {seq}, y_alone.data());
    omp_set_num_threads(threads);
    EXPECT_EQ(y, y_alone) << (decode ? "decode" : "prefill");
    EXPECT_EQ(batch.state, alone.state) << (decode ? "decode" : "prefill");
    EXPECT_EQ(batch.conv, alone.conv) << (decode ? "decode" : "prefill");
  }
}

// Prefill then decode steps equal one prefill of the whole sequence (state carry, conv seed).
TEST_P(KdaCpuTest, PrefillThenDecodeEqualsTheReferenceOfTheWholeSequence) {
  Rng rng(15);
  const Layer l = MakeLayer(2, 128, Gate::kBounded, rng);
  const int64_t prompt = 37, steps = 5, p = l.width();
  const Batch whole = MakeBatch(l, {prompt + steps}, rng);
  Batch ref = whole;
  std::vector<float> y_ref(static_cast<size_t>((prompt + steps) * p));
  ReferenceStep(l, ref, 0, prompt + steps, ref.state[0].data(), ref.conv[0].data(), y_ref.data());

  Batch run = whole;
  std::vector<float> y(y_ref.size());
  KdaSequence seq{0, prompt, run.state[0].data(), run.conv[0].data()};
  KdaPrefill(l.Params(), &seq, 1, run.Rows(), kKdaDefaultChunkSize, y.data());
  for (int64_t t = prompt; t < prompt + steps; ++t) {
    seq = {t, 1, run.state[0].data(), run.conv[0].data()};
    KdaDecode(l.Params(), &seq, 1, run.Rows(), y.data());
  }
  EXPECT_LE(NormwiseError(y.data(), y_ref.data(), static_cast<int64_t>(y.size())), kTolerance);
  EXPECT_LE(NormwiseError(run.state[0].data(), ref.state[0].data(),
                          static_cast<int64_t>(ref.state[0].size())),
            kTolerance);
  EXPECT_EQ(run.conv[0], ref.conv[0]);
}

// Speculative decoding's verifying forward (update_caches = false) gives the outputs of an
// updating run bit for bit and leaves the caches as they were; replaying the first j rows (the
// accepted ones) then equals a run that only ever saw those j tokens.
TEST_P(KdaCpuTest, AVerifyingRunLeavesTheCachesAndAReplayOfItsPrefixEqualsThatPrefix) {
  Rng rng(16);
  const std::vector<int64_t> lengths = {2, 5, 17};
  for (int dim : {7, 128}) {
    for (Gate gate : {Gate::kBounded, Gate::kUnboundedLarge}) {
      const Layer l = MakeLayer(3, dim, gate, rng);
      const std::string what = Describe(l, GetParam());
      const Batch before = MakeBatch(l, lengths, rng);
      Batch updating = before, verifying = before;
      const size_t rows = static_cast<size_t>(before.num_rows * l.width());
      std::vector<float> y_updating(rows), y_verifying(rows, -7.0f);
      std::vector<KdaSequence> seqs = updating.Sequences();
      KdaPrefill(l.Params(), seqs.data(), 3, updating.Rows(), kKdaDefaultChunkSize,
                 y_updating.data());
      seqs = verifying.Sequences();
      for (KdaSequence& s : seqs) s.update_caches = false;
      KdaPrefill(l.Params(), seqs.data(), 3, verifying.Rows(), kKdaDefaultChunkSize,
                 y_verifying.data());
      EXPECT_EQ(y_verifying, y_updating) << what;
      for (size_t s = 0; s < lengths.size(); ++s) {
        EXPECT_EQ(verifying.state[s], before.state[s]) << what << " seq " << s;
        EXPECT_EQ(verifying.conv[s], before.conv[s]) << what << " seq " << s;
      }
      // Replay j = 1 .. T rows of sequence 2 from its untouched caches (one row through the
      // decode kernel, as the engine does) against the prefix alone through the reference.
      for (int64_t j = 1; j <= lengths[2]; ++j) {
        Batch replay = verifying, ref = before;
        KdaSequence seq{lengths[0] + lengths[1], j, replay.state[2].data(), replay.conv[2].data()};
        std::vector<float> y(rows), y_ref(static_cast<size_t>(j * l.width()));
        if (j == 1) {
          KdaDecode(l.Params(), &seq, 1, replay.Rows(), y.data());
        } else {
          KdaPrefill(l.Params(), &seq, 1, replay.Rows(), kKdaDefaultChunkSize, y.data());
        }
        ReferenceStep(l, ref, seq.row_offset, j, ref.state[2].data(), ref.conv[2].data(),
                      y_ref.data());
        EXPECT_LE(NormwiseError(replay.state[2].data(), ref.state[2].data(),
                                static_cast<int64_t>(ref.state[2].size())),
                  kTolerance)
            << what << " replay of " << j;
        EXPECT_EQ(replay.conv[2], ref.conv[2]) << what << " replay of " << j;
      }
    }
  }
}

// The vector math of kda_simd.h against f64 libm, over its whole input range (8 lanes in this
// baseline-compiled file; the kernels use the same source at 16 lanes). 1 ulp = 2^-24 relative.
TEST(KdaMathTest, ExpLog1pSoftplusSigmoidAreWithinThreeUlpsOfF64) {
  constexpr double kUlp = 5.960464477539063e-8;
  double exp_err = 0, log1p_err = 0, softplus_err = 0, sigmoid_err = 0;
  constexpr int kSteps = 200000;
  for (int i = 0; i <= kSteps; ++i) {
    const double f = static_cast<double>(i) / kSteps;
    const float x = static_cast<float>(-87.3 + 175.6 * f);  // Exp's accurate range
    const double e = std::exp(double{x});
    exp_err = std::max(exp_err, std::abs(kda::Exp<8>(kda::Splat<8>(x))[0] - e) / e);
    const float u = static_cast<float>(f);
    if (u > 0.0f) {
      const double l = std::log1p(double{u});
      log1p_err = std::max(log1p_err, std::abs(kda::Log1pUnit<8>(kda::Splat<8>(u))[0] - l) / l);
    }
    const float z = static_cast<float>(-30.0 + 60.0 * f);
    const double sp = std::log1p(std::exp(double{z})), sg = 1.0 / (1.0 + std::exp(-double{z}));
    softplus_err =
        std::max(softplus_err, std::abs(kda::Softplus<8>(kda::Splat<8>(z))[0] - sp) / sp);
    sigmoid_err = std::max(sigmoid_err, std::abs(kda::Sigmoid<8>(kda::Splat<8>(z))[0] - sg) / sg);
  }
  EXPECT_LE(exp_err, 2 * kUlp);
  EXPECT_LE(log1p_err, 2 * kUlp);
  EXPECT_LE(softplus_err, 3 * kUlp);
  EXPECT_LE(sigmoid_err, 3 * kUlp);
  EXPECT_EQ(kda::Exp<8>(kda::Splat<8>(-100.0f))[0], 0.0f);             // below range: 0
  EXPECT_TRUE(std::isfinite(kda::Exp<8>(kda::Splat<8>(1000.0f))[0]));  // above: clamped
}

INSTANTIATE_TEST_SUITE_P(kda, KdaCpuTest, ::testing::Values(Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

}  // namespace
}  // namespace strata::kernels::cpu
