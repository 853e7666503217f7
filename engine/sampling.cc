#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/splitmix64.h"
#include "kernels/cpu/sampling.h"

namespace strata::engine {
namespace {

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Candidates ranked per draw when top-k is off (more only when needed).
constexpr int64_t kFirstCandidates = 1024;

using TailEntry = SampleScratch::TailEntry;

// Scratch of the draws that bring none (only grows; shared by every sampler of the thread).
SampleScratch& ThreadScratch() {
  thread_local SampleScratch scratch;
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

constexpr auto kTailBetter = [](const TailEntry& a, const TailEntry& b) {
  return kernels::cpu::Better(a.key, b.key);
};

// Selection by mass in rank order: the index i in [lo, hi) of the entry at which the running
// weight of a[lo, hi) taken best first reaches `target` (mass ≥ target, or > when `strict`),
// with a reordered so that a[lo, i) are exactly the entries ranked before it. Quickselect:
// each pass partitions around a pivot (branch-free), sums the weight of the better side and
// keeps the side the target falls in, so the cost is O(hi − lo) instead of a sort; short ranges
// are sorted and walked. When rounding leaves the target unreached, the worst entry.
int64_t SelectByMass(TailEntry* a, int64_t lo, int64_t hi, double target, bool strict) {
  const auto reached = [&](double mass) { return strict ? mass > target : mass >= target; };
  const int64_t lo0 = lo, hi0 = hi;
  constexpr int64_t kSortBelow = 48;
  while (hi - lo > kSortBelow) {
    // Median of three by rank as the pivot, moved to hi − 1.
    const int64_t mid = lo + (hi - lo) / 2;
    if (kTailBetter(a[mid], a[lo])) std::swap(a[mid], a[lo]);
    if (kTailBetter(a[hi - 1], a[lo])) std::swap(a[hi - 1], a[lo]);
    if (kTailBetter(a[mid], a[hi - 1])) std::swap(a[mid], a[hi - 1]);
    const kernels::cpu::ScoredId pivot = a[hi - 1].key;
    int64_t i = lo;
    double sums[4] = {0, 0, 0, 0};  // independent chains: one f64 add chain costs 4 cycles/entry
    for (int64_t j = lo; j < hi - 1; ++j) {  // [lo, i): better than the pivot
      const TailEntry e = a[j];
      const bool b = kernels::cpu::Better(e.key, pivot);
      a[j] = a[i];
      a[i] = e;
      sums[j & 3] += b ? static_cast<double>(e.p) : 0.0;
      i += b;
    }
    const double mass = (sums[0] + sums[1]) + (sums[2] + sums[3]);
    std::swap(a[i], a[hi - 1]);  // the pivot, ranked right after a[lo, i)
    if (reached(mass)) {
      hi = i;
      continue;
    }
    target -= mass;
    if (reached(a[i].p)) return i;
    target -= a[i].p;
    lo = i + 1;
  }
  std::sort(a + lo, a + hi, kTailBetter);
  double mass = 0;
  for (int64_t i = lo; i < hi; ++i) {
    mass += a[i].p;
    if (reached(mass)) return i;
  }
  int64_t worst = lo0;
  for (int64_t i = lo0 + 1; i < hi0; ++i) {
    if (kTailBetter(a[worst], a[i])) worst = i;
  }
  return worst;
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
  for (uint64_t& word : s_) word = SplitMix64Next(seed);
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

int32_t Sampler::SampleWithUniform(float* logits, int64_t vocab, double u, SampleScratch* scratch) {
  SizeForVocab(vocab);
  ApplyPenalties(logits, vocab);
  if (params_.greedy()) {
    const int32_t chosen = static_cast<int32_t>(kernels::cpu::Argmax(logits, vocab));
    Record(chosen, /*output=*/true);
    return chosen;
  }
  const int64_t keep = params_.top_k > 0 && params_.top_k < vocab ? params_.top_k : vocab;
  const int32_t chosen = Draw(logits, vocab, keep, u, scratch ? *scratch : ThreadScratch());
  Record(chosen, /*output=*/true);
  return chosen;
}

// Softmax at temperature over the candidates ranked by logit, then top-p and min-p cuts and the
// draw — the full-sort algorithm: cumulative weights in rank order, f64 sums. With top-k every
// candidate is ranked (sorted, weights in f64). Without, the best kFirstCandidates are, and the
// normaliser adds the others' weight (f32 exp); when a cut or the draw lies beyond them (a flat
// distribution), the rest is searched by SelectByMass with the same f32 weights rather than
// sorted. The result equals the full sort's except for that rounding (f32 weights of the tokens
// past the first candidates, sums in another order): a target within ~1e-6 of a rank boundary.
int32_t Sampler::Draw(const float* logits, int64_t vocab, int64_t keep, double u,
                      SampleScratch& scratch) const {
  const int64_t m = keep < vocab ? keep : std::min(vocab, kFirstCandidates);
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
  const double ranked_mass = total;
  if (!complete) total += UnrankedMass(logits, vocab, cand, m, max_logit, inv_t);
  // The tokens ranked after cand[m − 1], with their weights: built when a cut or the draw
  // reaches past the ranked ones (never with top-k).
  // The normaliser counted them at `tail_claimed` (SumExpBelow's f32 block sums); a target
  // carried into the tail is rescaled to their f64 sum, so rounding never pushes it past them.
  TailEntry* tail = nullptr;
  int64_t tail_size = 0;
  double tail_scale = 1;
  const auto build_tail = [&] {
    scratch.weights.resize(static_cast<size_t>(vocab));
    scratch.tail.resize(static_cast<size_t>(vocab));
    kernels::cpu::ExpShifted(logits, vocab, static_cast<float>(max_logit),
                             static_cast<float>(inv_t), scratch.weights.data());
    tail = scratch.tail.data();
    const kernels::cpu::ScoredId last = cand[m - 1];
    for (int64_t i = 0; i < vocab; ++i) {
      const float x = std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i];
      const TailEntry e{{x, static_cast<int32_t>(i)}, scratch.weights[static_cast<size_t>(i)]};
      tail[tail_size] = e;
      tail_size += kernels::cpu::Better(last, e.key);
    }
    double tail_mass = 0;
    for (int64_t i = 0; i < tail_size; ++i) tail_mass += tail[i].p;
    const double tail_claimed = total - ranked_mass;
    if (tail_claimed > 0) tail_scale = tail_mass / tail_claimed;
  };
  int64_t cut = keep;  // tokens kept, in rank order
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
      build_tail();
      const double target = (params_.top_p - mass) * total * tail_scale;
      cut = m + 1 + SelectByMass(tail, 0, tail_size, target, /*strict=*/false);
    }
  }
  if (params_.min_p > 0.0f) {
    const double floor = params_.min_p * probs[0];
    int64_t i = 1;
    while (i < std::min(cut, m) && probs[i] >= floor) ++i;
    if (i < m || cut <= m) {
      cut = i;
    } else {  // every ranked token is kept: so are the tail's kept ones of weight ≥ floor
      if (tail == nullptr) build_tail();
      const int64_t kept_tail = std::min(cut, vocab) - m;
      cut = m + (std::partition(tail, tail + kept_tail,
                                [floor](const TailEntry& e) { return e.p >= floor; }) -
                 tail);
    }
  }
  double kept_mass = total;
  if (cut <= m) {
    kept_mass = 0;
    for (int64_t i = 0; i < cut; ++i) kept_mass += probs[i];
  } else if (cut < vocab) {  // the ranked tokens and the first cut − m of the tail
    kept_mass = ranked_mass;
    for (int64_t i = 0; i < cut - m; ++i) kept_mass += tail[i].p;
  }
  double draw = u * kept_mass;
  for (int64_t i = 0; i < std::min(cut, m); ++i) {
    draw -= probs[i];
    if (draw < 0) return cand[i].id;
  }
  if (cut <= m) return cand[cut - 1].id;
  if (tail == nullptr) build_tail();
  if (cut >= vocab) draw *= tail_scale;  // kept_mass was the normaliser's total
  return tail[SelectByMass(tail, 0, std::min(cut, vocab) - m, draw, /*strict=*/true)].key.id;
}

}  // namespace strata::engine
