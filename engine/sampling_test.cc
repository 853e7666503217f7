#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/sampling.h"

namespace strata::engine {
namespace {

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

TEST(SamplingTest, GreedyPicksTheArgmaxAndTheLowestIdOnTies) {
  Sampler sampler(Greedy(), 0, {});
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sampler.Sample(logits.data(), 4), 1);
}

TEST(SamplingTest, SameSeedGivesTheSameTokensAndOtherSeedsDiffer) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  std::vector<float> base(50);
  for (int i = 0; i < 50; ++i) base[i] = std::sin(static_cast<float>(i));
  auto draw = [&](SamplingParams params) {
    Sampler sampler(params, 0, {});
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) {
      std::vector<float> logits = base;
      out.push_back(sampler.Sample(logits.data(), 50));
    }
    return out;
  };
  EXPECT_EQ(draw(p), draw(p));
  SamplingParams other = p;
  other.seed = 99;
  EXPECT_NE(draw(p), draw(other));
}

// A token picked elsewhere with NextUniform's draw (device sampling), or picked here with that
// draw (SampleWithUniform: a row the device handed back), leaves the sampler where Sample would
// have: every later Sample gives the tokens of a sampler that sampled all along.
TEST(SamplingTest, NextUniformConsumesExactlyTheDrawSampleWould) {
  std::vector<float> base(50);
  for (int i = 0; i < 50; ++i) base[i] = std::sin(static_cast<float>(i));
  for (float temperature : {0.0f, 0.7f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = 0.9f;
    p.seed = 77;
    Sampler all_here(p, 0, {}), mixed(p, 0, {});
    for (int step = 0; step < 30; ++step) {
      std::vector<float> a = base, b = base;
      const int32_t expected = all_here.Sample(a.data(), 50);
      if (step % 3 == 0) {
        mixed.NextUniform();  // the device would pick with this uniform
        mixed.Accept(expected);
      } else if (step % 3 == 1) {
        // A device row handed back: the host samples with the uniform the device was given.
        const double u = mixed.NextUniform();
        EXPECT_EQ(mixed.SampleWithUniform(b.data(), 50, u), expected)
            << "T " << temperature << " step " << step;
      } else {
        EXPECT_EQ(mixed.Sample(b.data(), 50), expected) << "T " << temperature << " step " << step;
      }
    }
  }
}

// The history a device sampler is given (penalized_ids + output_count) reproduces Sample's
// penalties when applied to the listed ids only: each id once, the repetition penalty on every
// one, presence / frequency where the count is > 0 — and Accept keeps it as Sample does.
TEST(SamplingTest, PenaltyHistoryReproducesThePenaltiesSparsely) {
  constexpr int64_t kVocab = 61;
  for (int mode = 0; mode < 4; ++mode) {
    SamplingParams p;
    p.seed = 5;
    p.temperature = 0.9f;
    if (mode == 0 || mode == 2) p.repetition_penalty = 1.3f;
    if (mode == 1 || mode == 2) p.presence_penalty = 0.4f, p.frequency_penalty = -0.3f;
    const std::vector<int32_t> prompt = {3, 9, 3, 60, 0};
    Sampler sampler(p, 0, prompt), accepted(p, 0, prompt);
    std::set<int32_t> generated;
    for (int step = 0; step < 40; ++step) {
      std::vector<float> logits(kVocab);
      for (int64_t v = 0; v < kVocab; ++v) logits[v] = std::sin(static_cast<float>(v * 7 + step));
      std::vector<float> sparse = logits;
      const std::vector<int32_t> ids = sampler.penalized_ids();  // a copy: Sample appends
      EXPECT_EQ(std::set<int32_t>(ids.begin(), ids.end()).size(), ids.size()) << "duplicates";
      for (int32_t id : ids) {
        float& x = sparse[id];
        if (p.repetition_penalty != 1.0f) {
          x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
        }
        const int32_t count = sampler.output_count(id);
        if (count > 0) {
          x -= std::fma(static_cast<float>(count), p.frequency_penalty, p.presence_penalty);
        }
      }
      accepted.NextUniform();  // the device would draw with this uniform
      const int32_t token = sampler.Sample(logits.data(), kVocab);
      EXPECT_EQ(std::memcmp(sparse.data(), logits.data(), kVocab * sizeof(float)), 0)
          << "mode " << mode << " step " << step;
      accepted.Accept(token);
      generated.insert(token);
      // The same ids (their order depends on when each sampler was first asked).
      std::vector<int32_t> a = accepted.penalized_ids(), b = sampler.penalized_ids();
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_EQ(a, b);
      for (int32_t id : ids) EXPECT_EQ(accepted.output_count(id), sampler.output_count(id));
    }
    std::set<int32_t> expected;
    if (p.repetition_penalty != 1.0f) expected.insert(prompt.begin(), prompt.end());
    if (mode != 3) expected.insert(generated.begin(), generated.end());
    const std::vector<int32_t>& ids = sampler.penalized_ids();
    EXPECT_EQ(std::set<int32_t>(ids.begin(), ids.end()), expected) << "mode " << mode;
  }
}

TEST(SamplingTest, DrawFrequenciesFollowTheSoftmax) {
  // logits log(0.5), log(0.3), log(0.2) at temperature 1 -> probabilities 0.5/0.3/0.2
  SamplingParams p;
  p.seed = 7;
  Sampler sampler(p, 0, {});
  int counts[3] = {0, 0, 0};
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    counts[sampler.Sample(logits.data(), 3)]++;
  }
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.015);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.015);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.015);
}

TEST(SamplingTest, TopKTopPAndMinPRestrictTheCandidates) {
  const std::vector<float> base = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  auto support = [&](SamplingParams p) {
    p.seed = 3;
    Sampler sampler(p, 0, {});
    std::vector<int> seen(4, 0);
    for (int i = 0; i < 2000; ++i) {
      std::vector<float> logits = base;
      seen[sampler.Sample(logits.data(), 4)] = 1;
    }
    return seen;
  };
  SamplingParams top_k;
  top_k.top_k = 2;
  EXPECT_EQ(support(top_k), (std::vector<int>{1, 1, 0, 0}));
  SamplingParams top_p;
  top_p.top_p = 0.65f;  // 0.4 + 0.3 = 0.7 >= 0.65: two tokens
  EXPECT_EQ(support(top_p), (std::vector<int>{1, 1, 0, 0}));
  SamplingParams min_p;
  min_p.min_p = 0.45f;  // keep p >= 0.18
  EXPECT_EQ(support(min_p), (std::vector<int>{1, 1, 1, 0}));
  SamplingParams all;
  EXPECT_EQ(support(all), (std::vector<int>{1, 1, 1, 1}));
}

// The full-sort algorithm the sampler implements (sampling.h): rank by (logit descending, id
// ascending), weights exp((x − max)/T) — f64 for the first 1,024 ranks, the f32 exp
// (kernels::cpu::ExpShifted) after them, as the sampler weighs them — cumulative weights in rank
// order for the top-p cut, the min-p cut and the draw. Returns −1 when the result sits within
// `slack` (relative) of a rank boundary, where the two may round differently (the sampler's
// normaliser sums the f32 weights in f32 blocks: ~1e-7 of the total).
int32_t FullSortDraw(const std::vector<float>& logits, float temperature, float top_p, float min_p,
                     double u, double slack) {
  const auto vocab = static_cast<int64_t>(logits.size());
  std::vector<kernels::cpu::ScoredId> ranked;
  for (int64_t i = 0; i < vocab; ++i) {
    const float x = std::isnan(logits[i]) ? -INFINITY : logits[i];
    ranked.push_back({x, static_cast<int32_t>(i)});
  }
  std::sort(ranked.begin(), ranked.end(), kernels::cpu::Better);
  const double max = ranked[0].value, inv_t = 1.0 / temperature;
  std::vector<float> f32(static_cast<size_t>(vocab));
  kernels::cpu::ExpShifted(logits.data(), vocab, static_cast<float>(max), static_cast<float>(inv_t),
                           f32.data());
  std::vector<double> w(static_cast<size_t>(vocab)), cum(static_cast<size_t>(vocab));
  double total = 0;
  for (int64_t r = 0; r < vocab; ++r) {
    w[r] = r < 1024 ? std::exp((ranked[r].value - max) * inv_t) : f32[ranked[r].id];
    total += w[r];
    cum[r] = total;
  }
  int64_t cut = vocab;
  if (top_p < 1.0f) {
    cut = 0;
    while (cut < vocab - 1 && cum[cut] < top_p * total) ++cut;
    if (std::abs(cum[cut] - top_p * total) < slack * total) return -1;
    if (cut > 0 && std::abs(cum[cut - 1] - top_p * total) < slack * total) return -1;
    ++cut;
  }
  if (min_p > 0.0f) {
    int64_t i = 1;
    while (i < cut && w[i] >= min_p * w[0]) ++i;
    if (i < vocab && std::abs(w[std::min(i, vocab - 1)] - min_p * w[0]) < slack * w[0]) return -1;
    cut = i;
  }
  const double target = u * cum[cut - 1];
  for (int64_t r = 0; r < cut; ++r) {
    if (cum[r] > target) {
      if (std::abs(cum[r] - target) < slack * total) return -1;
      if (r > 0 && std::abs(cum[r - 1] - target) < slack * total) return -1;
      return ranked[r].id;
    }
  }
  return -1;  // u at the very top: rounding decides
}

// Flat rows (a random-weight model's: the draw and the top-p cut lie far past the first 1,024
// ranks, where the sampler selects by weight instead of sorting), tied logits, NaN and −inf:
// every draw is the full sort's.
TEST(SamplingTest, DrawsEqualTheFullSortAlgorithmOnFlatAndTiedRows) {
  std::mt19937 rng(19);
  int compared = 0, skipped = 0;
  for (const int64_t vocab : {int64_t{1500}, int64_t{5003}, int64_t{40000}}) {
    for (const float sigma : {0.0f, 0.5f, 1.0f, 3.0f}) {  // 0: integer logits, many ties
      std::vector<float> row(static_cast<size_t>(vocab));
      std::normal_distribution<float> normal(0.0f, sigma);
      for (float& x : row) {
        x = sigma == 0.0f ? static_cast<float>(static_cast<int>(rng() % 7) - 3) : normal(rng);
      }
      row[3] = NAN;
      row[vocab / 2] = -INFINITY;
      for (const float temperature : {0.7f, 1.0f, 1.8f}) {
        for (const auto& [top_p, min_p] : std::vector<std::pair<float, float>>{
                 {1.0f, 0.0f}, {0.9f, 0.0f}, {0.5f, 0.0f}, {1.0f, 0.05f}, {0.95f, 0.01f}}) {
          SamplingParams p;
          p.temperature = temperature;
          p.top_p = top_p;
          p.min_p = min_p;
          p.seed = 1;
          Sampler sampler(p, 0, {});
          for (const double u : {0.0, 0.013, 0.25, 0.5, 0.77, 0.93, 0.99}) {
            const int32_t want = FullSortDraw(row, temperature, top_p, min_p, u, 1e-6);
            if (want < 0) {
              ++skipped;
              continue;
            }
            std::vector<float> logits = row;
            EXPECT_EQ(sampler.SampleWithUniform(logits.data(), vocab, u), want)
                << "vocab " << vocab << " sigma " << sigma << " T " << temperature << " top_p "
                << top_p << " min_p " << min_p << " u " << u;
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 8 * skipped) << compared << " compared, " << skipped << " skipped";
}

TEST(SamplingTest, LogitBiasAndPenaltiesChangeLogitsAsSpecified) {
  SamplingParams p = Greedy();
  p.logit_bias = {{2, 100.0f}};
  Sampler biased(p, 0, {});
  std::vector<float> logits = {5.0f, 1.0f, 0.0f};
  EXPECT_EQ(biased.Sample(logits.data(), 3), 2);

  // repetition penalty 2 over the prompt {0, 1}: 3.0 -> 1.5 (positive divides), -1 -> -2
  SamplingParams r = Greedy();
  r.repetition_penalty = 2.0f;
  Sampler rep(r, 0, {0, 1});
  std::vector<float> l2 = {3.0f, -1.0f, 2.0f};
  EXPECT_EQ(rep.Sample(l2.data(), 3), 2);
  EXPECT_FLOAT_EQ(l2[0], 1.5f);
  EXPECT_FLOAT_EQ(l2[1], -2.0f);

  // presence 0.5 + frequency 0.25 per occurrence of generated tokens (not the prompt)
  SamplingParams f = Greedy();
  f.presence_penalty = 0.5f;
  f.frequency_penalty = 0.25f;
  Sampler freq(f, 0, {1});
  std::vector<float> l3 = {1.0f, 0.9f};
  EXPECT_EQ(freq.Sample(l3.data(), 2), 0);  // token 0 generated once
  std::vector<float> l4 = {1.0f, 0.9f};
  EXPECT_EQ(freq.Sample(l4.data(), 2), 1);  // 1.0 - 0.5 - 0.25 = 0.25 < 0.9
  EXPECT_FLOAT_EQ(l4[0], 0.25f);
  EXPECT_FLOAT_EQ(l4[1], 0.9f);  // the prompt token is not penalised
}

TEST(SamplingTest, MinTokensKeepsStopIdsOutUntilThatManyWereGenerated) {
  SamplingParams p = Greedy();
  p.min_tokens = 3;
  p.min_tokens_stop_ids = {0, 2};
  Sampler s(p, 0, {});
  for (int step = 0; step < 5; ++step) {
    std::vector<float> logits = {9.0f, 1.0f, 8.0f, 0.5f};  // the stop ids lead
    EXPECT_EQ(s.ModifiesLogits(), step < 3) << step;
    const int32_t id = s.Sample(logits.data(), 4);
    if (step < 3) {
      EXPECT_EQ(id, 1) << step;
      EXPECT_TRUE(std::isinf(logits[0]) && std::isinf(logits[2]));
    } else {
      EXPECT_EQ(id, 0) << step;
      EXPECT_TRUE(s.blocked_stop_ids().empty());
    }
  }
  // With temperature: 200 draws from a row where a stop id has almost all the mass.
  p.temperature = 1.0f;
  p.min_tokens = 200;
  Sampler t(p, 7, {});
  for (int step = 0; step < 200; ++step) {
    std::vector<float> logits = {20.0f, 0.0f, 20.0f, 0.0f};
    const int32_t id = t.Sample(logits.data(), 4);
    ASSERT_TRUE(id == 1 || id == 3) << step;
  }
}

TEST(SamplingTest, ValidateNamesTheFieldAndTheRange) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_EQ(p.Validate(10).message(), "top_p must be in (0, 1], got 0.000000");
  p = {};
  p.temperature = -1;
  EXPECT_FALSE(p.Validate(10).ok());
  p = {};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_EQ(p.Validate(10).message(), "logit_bias token id 10 is outside the vocabulary [0, 10)");
  p = {};
  p.presence_penalty = 3;
  EXPECT_FALSE(p.Validate(10).ok());
  EXPECT_TRUE(SamplingParams{}.Validate(10).ok());
}

}  // namespace
}  // namespace strata::engine
