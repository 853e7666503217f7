#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace strata::engine {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

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
  if (params_.repetition_penalty != 1.0f) {
    for (int32_t id : prompt) Record(id);
    output_counts_.clear();  // the prompt counts for repetition only
  }
}

void Sampler::Record(int32_t token) {
  ++output_counts_[token];
  if (params_.repetition_penalty == 1.0f) return;
  if (static_cast<size_t>(token) >= seen_mask_.size()) seen_mask_.resize(token + 1, 0);
  if (!seen_mask_[static_cast<size_t>(token)]) {
    seen_mask_[static_cast<size_t>(token)] = 1;
    seen_.push_back(token);
  }
}

void Sampler::ApplyPenalties(float* logits, int64_t vocab) const {
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < vocab) logits[id] += bias;
  }
  if (params_.repetition_penalty != 1.0f) {
    const float rp = params_.repetition_penalty;
    for (int32_t id : seen_) {
      if (id >= vocab) continue;
      logits[id] = logits[id] > 0 ? logits[id] / rp : logits[id] * rp;
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    for (const auto& [id, count] : output_counts_) {
      if (id >= vocab) continue;
      logits[id] -= params_.presence_penalty + params_.frequency_penalty * count;
    }
  }
}

int32_t Sampler::Sample(float* logits, int64_t vocab) {
  ApplyPenalties(logits, vocab);
  int32_t chosen = 0;
  if (params_.greedy()) {
    chosen = static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
    Record(chosen);
    return chosen;
  }
  // Candidates sorted by logit (descending, ties by id), truncated by top-k.
  scratch_.clear();
  for (int64_t i = 0; i < vocab; ++i) scratch_.emplace_back(logits[i], static_cast<int32_t>(i));
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = scratch_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = static_cast<size_t>(params_.top_k);
    std::partial_sort(scratch_.begin(), scratch_.begin() + keep, scratch_.end(), by_logit);
  } else {
    std::sort(scratch_.begin(), scratch_.end(), by_logit);
  }
  scratch_.resize(keep);
  // Softmax at temperature (f64 sums), then top-p and min-p on the sorted probabilities.
  const double inv_t = 1.0 / params_.temperature, max_logit = scratch_[0].first;
  std::vector<double> probs(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((scratch_[i].first - max_logit) * inv_t);
    total += probs[i];
  }
  size_t cut = keep;
  if (params_.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) {
      mass += probs[i] / total;
      if (mass >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const double floor = params_.min_p * probs[0];
    size_t i = 1;
    while (i < cut && probs[i] >= floor) ++i;
    cut = i;
  }
  double kept_mass = 0;
  for (size_t i = 0; i < cut; ++i) kept_mass += probs[i];
  double draw = rng_.Uniform() * kept_mass;
  chosen = scratch_[cut - 1].second;
  for (size_t i = 0; i < cut; ++i) {
    draw -= probs[i];
    if (draw < 0) {
      chosen = scratch_[i].second;
      break;
    }
  }
  Record(chosen);
  return chosen;
}

}  // namespace strata::engine
