// On-device sampling vs a host re-implementation of engine/sampling.cc's selection rules
// (Sampler::Sample with DrawFromBest in its full-sort form: every kept token ranked), for the
// same per-row uniforms: the penalised logits must match bit for bit and the chosen ids exactly.
// Vocabularies 1, primes, one above and several times the 1024-token chunk, and K3's 163840;
// peaked, flat (top-p walks past the first chunk) and tied (integer) logits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "kernels/cuda/sampling.h"
#include "kernels/cuda/testing.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::kEmulated;
using testing::TestSeed;

struct HostRow {
  SamplingRowParams p;
  double u = 0.0;
  std::vector<std::pair<int32_t, float>> bias;
};

// Steps 1–3 of engine Sampler::ApplyPenalties (kernels/cpu/sampling.h formulas), in place.
void HostPenalties(const HostRow& row, const uint8_t* seen, const int32_t* counts, float* x,
                   int64_t vocab) {
  for (const auto& [id, b] : row.bias) {
    if (id >= 0 && id < vocab) x[id] += b;
  }
  const SamplingRowParams& p = row.p;
  for (int64_t v = 0; v < vocab; ++v) {
    if (seen != nullptr && p.repetition_penalty != 1.0f && seen[v] != 0) {
      x[v] = x[v] > 0 ? x[v] / p.repetition_penalty : x[v] * p.repetition_penalty;
    }
    if (counts != nullptr && (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) &&
        counts[v] > 0) {
      x[v] -= std::fma(static_cast<float>(counts[v]), p.frequency_penalty, p.presence_penalty);
    }
  }
}

// Step 4 of Sampler::Sample / DrawFromBest with m = keep (a full sort by logit descending, id
// ascending; f64 probabilities and sums in rank order).
int32_t HostChoose(const SamplingRowParams& p, double u, const float* x, int64_t vocab) {
  if (p.temperature <= 1e-5f) return static_cast<int32_t>(std::max_element(x, x + vocab) - x);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  const int64_t keep = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
  const double inv_t = 1.0 / p.temperature, max_logit = x[order[0]];
  std::vector<double> probs(keep);
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((x[order[i]] - max_logit) * inv_t);
    total += probs[i];
  }
  int64_t cut = keep;
  if (p.top_p < 1.0f) {
    double mass = 0;
    for (int64_t i = 0; i < keep; ++i) {
      mass += probs[i] / total;
      if (mass >= p.top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * probs[0];
    int64_t i = 1;
    while (i < cut && probs[i] >= floor) ++i;
    cut = i;
  }
  double kept = 0;
  for (int64_t i = 0; i < cut; ++i) kept += probs[i];
  double draw = u * kept;
  for (int64_t i = 0; i < cut; ++i) {
    draw -= probs[i];
    if (draw < 0) return order[i];
  }
  return order[cut - 1];
}

// A mix of settings, one per row (cycled).
std::vector<HostRow> MakeRows(int rows, int64_t vocab, std::mt19937& rng) {
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::vector<HostRow> out(rows);
  for (int r = 0; r < rows; ++r) {
    HostRow& h = out[r];
    SamplingRowParams& p = h.p;
    h.u = uni(rng);
    switch (r % 13) {
      case 0:
        p.temperature = 0.0f;
        break;
      case 1:
        break;
      case 2:
        p.temperature = 0.7f, p.top_k = 1;
        break;
      case 3:
        p.temperature = 1.3f, p.top_k = 40;
        break;
      case 4:
        p.top_p = 0.9f;
        break;
      case 5:
        p.temperature = 0.8f, p.min_p = 0.1f;
        break;
      case 6:
        p.top_k = 50, p.top_p = 0.8f, p.min_p = 0.05f;
        break;
      case 7:
        p.temperature = 2.0f, p.top_p = 0.95f;
        break;
      case 8:
        p.top_k = 1500;
        break;
      case 9:
        p.repetition_penalty = 1.3f, p.presence_penalty = 0.5f, p.frequency_penalty = 0.3f;
        p.top_p = 0.9f;
        break;
      case 10:
        p.temperature = 0.0f, p.repetition_penalty = 0.7f, p.frequency_penalty = -0.4f;
        h.bias = {{0, 5.0f}, {static_cast<int32_t>(vocab - 1), 2.5f}, {-3, 9.0f}, {0, -1.0f}};
        break;
      case 11:
        p.temperature = 0.5f, p.top_k = 3, h.u = 0.0;
        break;
      default:
        p.presence_penalty = -1.0f;
        h.u = 0.9999999;
        h.bias = {{static_cast<int32_t>(vocab / 2), 3.0f}, {static_cast<int32_t>(vocab), 50.0f}};
        break;
    }
  }
  return out;
}

enum class Logits { kPeaked, kFlat, kTied };

std::vector<float> MakeLogits(Logits kind, size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> flat(-0.5f, 0.5f);
  std::uniform_int_distribution<int> tied(-3, 3);
  std::vector<float> x(n);
  for (float& v : x) {
    v = kind == Logits::kPeaked ? normal(rng)
        : kind == Logits::kFlat ? flat(rng)
                                : static_cast<float>(tied(rng));
  }
  return x;
}

// max_ranked_chunks > 0: rows may come back as kSampleOnHost; those must be rows whose walk
// really needed more ranks (never greedy or top-k ≤ one chunk), the others the host's token.
// *handed_back (optional): how many rows came back.
void RunCase(int64_t vocab, int rows, Logits kind, bool with_arrays, std::mt19937& rng,
             int max_ranked_chunks = 0, int* handed_back_rows = nullptr) {
  const std::string name = absl::StrCat(
      "V", vocab, "_rows", rows, "_kind", static_cast<int>(kind), with_arrays ? "" : "_noarrays",
      max_ranked_chunks > 0 ? absl::StrCat("_budget", max_ranked_chunks) : "");
  std::vector<float> logits = MakeLogits(kind, rows * vocab, rng);
  const std::vector<HostRow> host = MakeRows(rows, vocab, rng);
  // Penalty histories: ~5 % of the ids per row (half prompt-only, count 0), in shuffled order,
  // plus one id outside the vocabulary (ignored); the dense seen / counts are the host's view.
  std::vector<uint8_t> seen(rows * vocab);
  std::vector<int32_t> counts(rows * vocab);
  std::vector<int32_t> history_offsets = {0}, history_ids, history_counts;
  std::uniform_int_distribution<int> pct(0, 99);
  for (int r = 0; r < rows; ++r) {
    std::vector<int32_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int32_t id : ids) {
      if (pct(rng) >= 5) continue;
      const int32_t count = pct(rng) < 50 ? 0 : 1 + pct(rng) % 3;
      seen[r * vocab + id] = 1;
      counts[r * vocab + id] = count;
      history_ids.push_back(id);
      history_counts.push_back(count);
    }
    history_ids.push_back(r % 2 == 0 ? static_cast<int32_t>(vocab) : -1);
    history_counts.push_back(2);
    history_offsets.push_back(static_cast<int32_t>(history_ids.size()));
  }
  std::vector<SamplingRowParams> params;
  std::vector<double> uniforms;
  std::vector<int32_t> offsets = {0}, bias_ids;
  std::vector<float> bias_values;
  for (const HostRow& h : host) {
    params.push_back(h.p);
    uniforms.push_back(h.u);
    for (const auto& [id, b] : h.bias) {
      bias_ids.push_back(id);
      bias_values.push_back(b);
    }
    offsets.push_back(static_cast<int32_t>(bias_ids.size()));
  }
  bias_ids.push_back(0);  // never empty device arrays
  bias_values.push_back(0.0f);
  DeviceArray<float> d_logits(logits), d_bias_values(bias_values);
  DeviceArray<SamplingRowParams> d_params(params);
  DeviceArray<double> d_uniforms(uniforms);
  DeviceArray<int32_t> d_history_offsets(history_offsets), d_history_ids(history_ids),
      d_history_counts(history_counts);
  DeviceArray<int32_t> d_offsets(offsets), d_bias_ids(bias_ids), d_tokens(rows);
  d_tokens.Poison();
  SamplingInputs in;
  in.max_ranked_chunks = max_ranked_chunks;
  in.logits = d_logits.get();
  in.params = d_params.get();
  in.uniforms = d_uniforms.get();
  if (with_arrays) {
    in.history_offsets = d_history_offsets.get();
    in.history_ids = d_history_ids.get();
    in.history_counts = d_history_counts.get();
    in.bias_offsets = d_offsets.get();
    in.bias_ids = d_bias_ids.get();
    in.bias_values = d_bias_values.get();
  }
  STRATA_ASSERT_OK(SampleTokens(in, rows, vocab, d_tokens.get(), nullptr));
  const std::vector<int32_t> tokens = d_tokens.Download();
  const std::vector<float> penalised = d_logits.Download();
  int mismatches = 0, handed_back = 0;
  for (int r = 0; r < rows; ++r) {
    float* x = &logits[r * vocab];
    HostRow h = host[r];
    if (!with_arrays) h.bias.clear();
    HostPenalties(h, with_arrays ? &seen[r * vocab] : nullptr,
                  with_arrays ? &counts[r * vocab] : nullptr, x, vocab);
    EXPECT_EQ(std::memcmp(x, &penalised[r * vocab], vocab * sizeof(float)), 0)
        << name << " row " << r << ": penalised logits differ";
    const int32_t want = HostChoose(h.p, h.u, x, vocab);
    if (tokens[r] == kSampleOnHost && max_ranked_chunks > 0) {
      ++handed_back;
      const bool one_chunk =
          h.p.temperature <= 1e-5f || (h.p.top_k > 0 && h.p.top_k <= kSamplingChunk);
      EXPECT_FALSE(one_chunk) << name << " row " << r << ": handed back a one-chunk row";
      // The host's pick lies beyond the budget, or a cut decided there: either way the row's
      // best max_ranked_chunks · 1024 tokens did not settle it.
      continue;
    }
    if (tokens[r] != want) ++mismatches;
    EXPECT_EQ(tokens[r], want) << name << " row " << r << " (kind " << r % 13 << ")";
  }
  std::printf("[relerr] kernel=SampleTokens case=%s relerr=%.3e tol=0.0e+00 %s\n", name.c_str(),
              static_cast<double>(mismatches) / rows, mismatches == 0 ? "ok" : "FAIL");
  if (handed_back_rows != nullptr) *handed_back_rows = handed_back;
}

TEST(CudaSamplingTest, ChoosesTheSameTokensAsTheHostRules) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 41);
  for (int64_t vocab : {1, 7, 97, 1031, 4099}) {
    for (Logits kind : {Logits::kPeaked, Logits::kFlat, Logits::kTied}) {
      RunCase(vocab, 26, kind, true, rng);
    }
  }
  RunCase(1031, 13, Logits::kPeaked, false, rng);
  // Kimi's vocabulary; on the emulator a prime still several chunks long (the full size takes
  // a minute of warp collectives there).
  const int64_t large_vocab = kEmulated ? 20011 : 163840;
  RunCase(large_vocab, 13, Logits::kPeaked, true, rng);
  RunCase(large_vocab, 13, Logits::kFlat, true, rng);
}

// With a one-chunk budget (what the CUDA executor uses) rows either get the host's token or
// are handed back; over a flat distribution full-vocabulary draws are handed back, over a
// peaked one they are settled on the device.
TEST(CudaSamplingTest, RankBudgetHandsBackOnlyRowsThatNeedMoreRanks) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 43);
  const int64_t vocab = kEmulated ? 20011 : 163840;
  int handed_back = 0;
  RunCase(vocab, 13, Logits::kFlat, false, rng, 1, &handed_back);
  EXPECT_GT(handed_back, 0);
  RunCase(vocab, 13, Logits::kPeaked, false, rng, 1);
  RunCase(4099, 26, Logits::kTied, true, rng, 2);
}

// RowLogprobs vs f64 on the host: log_z = max + log Σ exp(x − max); the chosen token's and the
// best n tokens' x − log_z (ranked by logit descending, id ascending — ties exact); rows read
// through the logits_row / token_row indirection; a handed-back token gives NaN.
void RunLogprobCase(int64_t vocab, Logits kind, std::mt19937& rng) {
  constexpr int kRows = 7, kMaxTop = kSamplingChunk;
  const int num_tops[kRows] = {0, 1, 5, 20, kMaxTop, static_cast<int>(vocab) + 3, 2};
  const std::vector<float> logits = MakeLogits(kind, (kRows + 1) * vocab, rng);  // one spare row
  std::uniform_int_distribution<int32_t> any_id(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> tokens(kRows + 2);
  for (int32_t& t : tokens) t = any_id(rng);
  tokens[3] = kSampleOnHost;
  std::vector<LogprobRow> rows(kRows);
  for (int r = 0; r < kRows; ++r) rows[r] = {(r + 1) % (kRows + 1), r + 1, num_tops[r]};
  DeviceArray<float> d_logits(logits), d_token_logprob(kRows), d_top_logprobs(kRows * kMaxTop);
  DeviceArray<int32_t> d_tokens(tokens), d_top_ids(kRows * kMaxTop);
  DeviceArray<LogprobRow> d_rows(rows);
  d_token_logprob.Poison();
  d_top_ids.Poison();
  d_top_logprobs.Poison();
  STRATA_ASSERT_OK(
      RowLogprobs({d_logits.get(), d_tokens.get(), d_rows.get()}, kRows, vocab, kMaxTop,
                  {d_token_logprob.get(), d_top_ids.get(), d_top_logprobs.get()}, nullptr));
  const std::vector<float> token_logprob = d_token_logprob.Download();
  const std::vector<int32_t> top_ids = d_top_ids.Download();
  const std::vector<float> top_logprobs = d_top_logprobs.Download();
  double worst = 0.0;
  for (int r = 0; r < kRows; ++r) {
    const float* x = &logits[rows[r].logits_row * vocab];
    const double max_logit = *std::max_element(x, x + vocab);
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(x[v]) - max_logit);
    const double log_z = max_logit + std::log(sum);
    const int32_t token = tokens[rows[r].token_row];
    if (token < 0) {
      EXPECT_TRUE(std::isnan(token_logprob[r])) << "row " << r;
    } else {
      const double want = static_cast<double>(x[token]) - log_z;
      worst = std::max(worst, std::fabs(token_logprob[r] - want));
      EXPECT_NEAR(token_logprob[r], want, 1e-5) << "V" << vocab << " row " << r;
    }
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    const int n = std::min({num_tops[r], static_cast<int>(vocab), kMaxTop});
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(top_ids[r * kMaxTop + i], order[i])
          << "V" << vocab << " row " << r << " rank " << i;
      const double want = static_cast<double>(x[order[i]]) - log_z;
      worst = std::max(worst, std::fabs(top_logprobs[r * kMaxTop + i] - want));
      EXPECT_NEAR(top_logprobs[r * kMaxTop + i], want, 1e-5) << "row " << r << " rank " << i;
    }
  }
  std::printf("[relerr] kernel=RowLogprobs case=V%lld_kind%d relerr=%.3e tol=1.0e-05 %s\n",
              static_cast<long long>(vocab), static_cast<int>(kind), worst,
              worst <= 1e-5 ? "ok" : "FAIL");
}

TEST(CudaSamplingTest, LogprobsMatchTheHostDefinition) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 47);
  for (int64_t vocab : {1, 7, 1031, 4099}) {
    for (Logits kind : {Logits::kPeaked, Logits::kTied}) RunLogprobCase(vocab, kind, rng);
  }
  RunLogprobCase(kEmulated ? 20011 : 163840, Logits::kFlat, rng);
}

TEST(CudaSamplingTest, RejectsBadArguments) {
  SamplingInputs in;
  int32_t token = 0;
  EXPECT_FALSE(SampleTokens(in, 1, 10, &token, nullptr).ok());  // null logits / params
  float logit = 0.0f;
  SamplingRowParams p;
  double u = 0.5;
  in.logits = &logit;
  in.params = &p;
  in.uniforms = &u;
  EXPECT_FALSE(SampleTokens(in, 1, 0, &token, nullptr).ok());  // empty vocabulary
  LogprobInputs lin;
  LogprobOutputs lout;
  EXPECT_FALSE(RowLogprobs(lin, 1, 10, 5, lout, nullptr).ok());  // null pointers
  LogprobRow row;
  float token_logprob = 0.0f;
  lin = {&logit, &token, &row};
  lout.token_logprob = &token_logprob;
  EXPECT_FALSE(RowLogprobs(lin, 1, 10, kSamplingChunk + 1, lout, nullptr).ok());  // max_top
  EXPECT_FALSE(RowLogprobs(lin, 1, 10, 5, lout, nullptr).ok());  // top outputs missing
}

}  // namespace
}  // namespace strata::kernels::cuda
