#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/cpu/sampling.h"

namespace strata::engine {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Candidates ranked per draw when top-k is off (more only when needed).
constexpr int64_t kFirstCandidates = 1024;

// Per-thread candidate scratch (only grows; shared by every sampler of the thread).
struct Scratch {
  std::vector<kernels::cpu::ScoredId> candidates;
  std::vector<double> probs;
};
Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Σ exp((x − max)·inv_t) over the tokens ranked below the m candidates cand[0, m): those
// below the m-th value, and those equal to it with a higher id.
double UnrankedMass(const float* logits, int64_t vocab, const kernels::cpu::ScoredId* cand,
                    int64_t m, double max_logit, double inv_t) {
  const float last = cand[m - 1].value;
  const kernels::cpu::ExpSum below = kernels::cpu::SumExpBelow(
      logits, vocab, static_cast<float>(max_logit), static_cast<float>(inv_t), last);
  int64_t ranked_equal = 0;
  for (int64_t i = m - 1; i >= 0 && cand[i].value == last; --i) ++ranked_equal;
  return below.sum +
         static_cast<double>(below.num_equal - ranked_equal) * std::exp((last - max_logit) * inv_t);
}

absl::Status OutOfRange(const std::string& field, float value, const std::string& range) {
  return absl::InvalidArgumentError(field + " must be " + range + ", got " + std::to_string(value));
}

}  // namespace

absl::Status SamplingParams::Validate(int64_t vocab_size) const {
  if (!(temperature >= 0.0f) || temperature > 100.0f) {
    return OutOfRange("temperature", temperature, "in [0, 100]");
  }
  if (top_k < -1) return OutOfRange("top_k", static_cast<float>(top_k), "-1, 0 or positive");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return OutOfRange("top_p", top_p, "in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return OutOfRange("min_p", min_p, "in [0, 1]");
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 100.0f)) {
    return OutOfRange("repetition_penalty", repetition_penalty, "in (0, 100]");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return OutOfRange("presence_penalty", presence_penalty, "in [-2, 2]");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return OutOfRange("frequency_penalty", frequency_penalty, "in [-2, 2]");
  }
  if (min_tokens < 0) return OutOfRange("min_tokens", static_cast<float>(min_tokens), "≥ 0");
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError("logit_bias token id " + std::to_string(id) +
                                        " is outside the vocabulary [0, " +
                                        std::to_string(vocab_size) + ")");
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return OutOfRange("logit_bias value", bias, "in [-100, 100]");
    }
  }
  return absl::OkStatus();
}

Rng::Rng(uint64_t seed) {
  for (uint64_t& word : s_) word = SplitMix64(seed);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

Sampler::Sampler(SamplingParams params, uint64_t fallback_seed, const std::vector<int32_t>& prompt)
    : params_(std::move(params)), rng_(params_.seed.value_or(fallback_seed)) {
  if (params_.constraint) {
    matcher_ = params_.constraint->NewMatcher();
    matcher_decides_end_ = params_.constraint->DecidesEnd();
  }
  if (params_.repetition_penalty != 1.0f) {
    for (int32_t id : prompt) Record(id, /*output=*/false);
  }
}

bool Sampler::ModifiesLogits() const {
  return matcher_ != nullptr || !blocked_stop_ids().empty() || !params_.logit_bias.empty() ||
         params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
         params_.frequency_penalty != 0.0f;
}

void Sampler::SizeForVocab(int64_t vocab) {
  const size_t n = static_cast<size_t>(vocab);
  if (CountsOutputs() && output_counts_.size() < n) {
    output_counts_.resize(n, 0);
  }
  if (params_.repetition_penalty != 1.0f && seen_mask_.size() < n) seen_mask_.resize(n, 0);
}

const std::vector<int32_t>& Sampler::blocked_stop_ids() const {
  static const std::vector<int32_t> kNone;
  // A grammar decides where its output may end (blocking its end ids could leave no token).
  return num_generated_ < params_.min_tokens && !matcher_decides_end_ ? params_.min_tokens_stop_ids
                                                                      : kNone;
}

void Sampler::Record(int32_t token, bool output) {
  if (output) ++num_generated_;
  if (output && matcher_) matcher_->Accept(token);
  const auto id = static_cast<size_t>(token);
  const bool repetition = params_.repetition_penalty != 1.0f;
  const bool counted = output && CountsOutputs();
  if (!repetition && !counted) return;
  if (repetition && seen_mask_.size() <= id) seen_mask_.resize(id + 1, 0);
  if (counted && output_counts_.size() <= id) output_counts_.resize(id + 1, 0);
  // A token joins the list the first time a penalty applies to it.
  if (track_penalized_ids_ && (repetition ? seen_mask_[id] == 0 : output_counts_[id] == 0)) {
    penalized_ids_.push_back(token);
  }
  if (repetition) seen_mask_[id] = 1;
  if (counted) ++output_counts_[id];
}

const std::vector<int32_t>& Sampler::penalized_ids() {
  if (!track_penalized_ids_) {
    track_penalized_ids_ = true;
    const bool repetition = params_.repetition_penalty != 1.0f;
    const size_t n = repetition ? seen_mask_.size() : output_counts_.size();
    for (size_t id = 0; id < n; ++id) {
      if (repetition ? seen_mask_[id] != 0 : output_counts_[id] > 0) {
        penalized_ids_.push_back(static_cast<int32_t>(id));
      }
    }
  }
  return penalized_ids_;
}

void Sampler::ApplyPenalties(float* logits, int64_t vocab) const {
  if (matcher_) matcher_->MaskLogits(logits, vocab);
  for (int32_t id : blocked_stop_ids()) {
    if (id >= 0 && id < vocab) logits[id] = -std::numeric_limits<float>::infinity();
  }
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < vocab) logits[id] += bias;
  }
  if (params_.repetition_penalty != 1.0f) {
    kernels::cpu::ApplyRepetitionPenalty(logits, seen_mask_.data(), vocab,
                                         params_.repetition_penalty);
  }
  if (CountsOutputs()) {
    kernels::cpu::ApplyPresenceFrequencyPenalty(
        logits, output_counts_.data(), vocab, params_.presence_penalty, params_.frequency_penalty);
  }
}

double Sampler::NextUniform() { return params_.greedy() ? 0.0 : rng_.Uniform(); }

int32_t Sampler::Sample(float* logits, int64_t vocab) {
  return SampleWithUniform(logits, vocab, NextUniform());
}

int32_t Sampler::SampleWithUniform(float* logits, int64_t vocab, double u) {
  SizeForVocab(vocab);
  ApplyPenalties(logits, vocab);
  if (params_.greedy()) {
    const int32_t chosen = static_cast<int32_t>(kernels::cpu::Argmax(logits, vocab));
    Record(chosen, /*output=*/true);
    return chosen;
  }
  const int64_t keep = params_.top_k > 0 && params_.top_k < vocab ? params_.top_k : vocab;
  // With top-k every candidate is ranked; without, first the best kFirstCandidates.
  int64_t m = keep < vocab ? keep : std::min(vocab, kFirstCandidates);
  for (;;) {
    const int32_t chosen = DrawFromBest(logits, vocab, keep, m, u);
    if (chosen >= 0) {
      Record(chosen, /*output=*/true);
      return chosen;
    }
    m = std::min(keep, m * 16);
  }
}

// Softmax at temperature over the candidates ranked by logit (f64 sums in rank order), then
// top-p and min-p cuts and the draw — the full-sort algorithm on the ranked prefix. When only
// m < keep = vocab candidates are ranked, the normaliser adds the mass of the others (f32 exp,
// any order): the result equals the full sort's except for that rounding.
int32_t Sampler::DrawFromBest(const float* logits, int64_t vocab, int64_t keep, int64_t m,
                              double u) const {
  Scratch& scratch = ThreadScratch();
  const size_t need = static_cast<size_t>(kernels::cpu::TopKScratchSize(m));
  if (scratch.candidates.size() < need) scratch.candidates.resize(need);
  if (scratch.probs.size() < static_cast<size_t>(m)) scratch.probs.resize(static_cast<size_t>(m));
  kernels::cpu::ScoredId* cand = scratch.candidates.data();
  double* probs = scratch.probs.data();
  kernels::cpu::TopK(logits, vocab, m, cand);
  const double inv_t = 1.0 / params_.temperature, max_logit = cand[0].value;
  double total = 0;
  for (int64_t i = 0; i < m; ++i) {
    probs[i] = std::exp((cand[i].value - max_logit) * inv_t);
    total += probs[i];
  }
  const bool complete = m == keep;
  if (!complete) total += UnrankedMass(logits, vocab, cand, m, max_logit, inv_t);
  int64_t cut = keep;
  if (params_.top_p < 1.0f) {
    double mass = 0;
    int64_t i = 0;
    for (; i < m; ++i) {
      mass += probs[i] / total;
      if (mass >= params_.top_p) break;
    }
    if (i < m) {
      cut = i + 1;
    } else if (!complete) {
      return -1;
    }
  }
  if (params_.min_p > 0.0f) {
    const double floor = params_.min_p * probs[0];
    int64_t i = 1;
    while (i < std::min(cut, m) && probs[i] >= floor) ++i;
    if (i == m && cut > m) return -1;
    cut = i;
  }
  double kept_mass = total;
  if (cut <= m) {
    kept_mass = 0;
    for (int64_t i = 0; i < cut; ++i) kept_mass += probs[i];
  }
  double draw = u * kept_mass;
  for (int64_t i = 0; i < std::min(cut, m); ++i) {
    draw -= probs[i];
    if (draw < 0) return cand[i].id;
  }
  return cut <= m ? cand[cut - 1].id : -1;
}

}  // namespace strata::engine
