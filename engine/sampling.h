// Token sampling for one sequence (vLLM semantics, applied in this order):
//   0. a constraint (structured output) sets the logits of tokens it forbids to −inf, and so
//      do min_tokens for the stop ids until that many tokens were generated;
//   1. logit_bias added;
//   2. repetition_penalty over prompt + generated tokens (logit > 0: divided, else multiplied);
//   3. presence / frequency penalties over generated tokens (logit −= presence·[count > 0] +
//      frequency·count);
//   4. temperature 0 → greedy (argmax, lowest id on ties); else logits / temperature, softmax,
//      top-k, top-p (nucleus, smallest set with mass ≥ p), min-p (prob ≥ min_p · max prob),
//      then one draw from the renormalised distribution.
// A seed makes the draws reproducible: the same seed and inputs give the same tokens.
//
// Cost per token: vectorised penalties and argmax; with temperature, the candidates are
// selected without sorting the vocabulary (kernels/cpu/sampling.h): top-k exactly, otherwise
// the best 1024 sorted plus the mass of the rest; when a cut or the draw lies beyond them (a
// flat row), the rest is selected by weight, O(vocab). No heap allocation in steady state: the
// penalty arrays are sized to the vocabulary once, the draw's scratch (SampleScratch: the
// caller's, or the thread's) only grows.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/sampling.h"

namespace strata::engine {

// Which tokens one sequence may generate next (structured output: engine/structured/). A
// TokenConstraint is immutable and shared by every sequence compiled from one request; each
// sequence walks its own TokenMatcher, which the sampler owns.
class TokenMatcher {
 public:
  virtual ~TokenMatcher() = default;
  // Computes the mask of the next MaskLogits ahead of it (it depends only on the tokens
  // accepted so far), so executors can build masks in parallel or while the device runs the
  // forward. Optional: MaskLogits computes it itself when not prepared. Any one thread at a time
  // per matcher.
  virtual void Prepare(int64_t vocab) { (void)vocab; }
  // Sets logits[id] = −inf for every id in [0, vocab) that may not come next (at least one id
  // is always left: the end-of-sequence ids when nothing else fits).
  virtual void MaskLogits(float* logits, int64_t vocab) = 0;
  // Advances past the generated token.
  virtual void Accept(int32_t token) = 0;
};

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual std::unique_ptr<TokenMatcher> NewMatcher() const = 0;
  // Whether it decides where the output may end (a grammar offers its end ids only once the
  // output is complete: min_tokens is then not applied on top); token filters do not.
  virtual bool DecidesEnd() const { return true; }
};

struct SamplingParams {
  float temperature = 1.0f;                           // 0 = greedy
  int top_k = 0;                                      // 0 or −1: off
  float top_p = 1.0f;                                 // (0, 1]
  float min_p = 0.0f;                                 // [0, 1]
  float repetition_penalty = 1.0f;                    // > 0
  float presence_penalty = 0.0f;                      // [−2, 2]
  float frequency_penalty = 0.0f;                     // [−2, 2]
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id → bias in [−100, 100]
  std::optional<uint64_t> seed;
  std::shared_ptr<const TokenConstraint> constraint;  // null: any token
  // vLLM's min_tokens: min_tokens_stop_ids (EOS and stop_token_ids) cannot be drawn before
  // min_tokens tokens were generated.
  int64_t min_tokens = 0;
  std::vector<int32_t> min_tokens_stop_ids;

  bool greedy() const { return temperature <= 1e-5f; }
  // InvalidArgument naming the field and its allowed range.
  absl::Status Validate(int64_t vocab_size) const;
};

// A small, fast, platform-independent PRNG (xoshiro256**, seeded by splitmix64).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  double Uniform();  // [0, 1) with 53 random bits

 private:
  uint64_t s_[4];
};

// Working memory of draws: sized to the largest vocabulary and candidate count seen, never
// shrunk. A caller that samples rows in parallel tasks hands each task its own (so a pool
// worker's first draw allocates nothing); without one, the calling thread's is used.
struct SampleScratch {
  struct TailEntry {  // a token past the ranked candidates, with its weight (f32)
    kernels::cpu::ScoredId key;
    float p;
  };
  std::vector<kernels::cpu::ScoredId> candidates;
  std::vector<double> probs;
  std::vector<float> weights;  // [vocab]
  std::vector<TailEntry> tail;
  // engine/step_sampling.h: a row before the penalties, and its top logprobs.
  std::vector<float> raw_logits;
  std::vector<kernels::cpu::ScoredId> top;
};

// Samples tokens for one sequence; remembers the tokens it has seen for the penalties.
class Sampler {
 public:
  // `fallback_seed` is used when params.seed is absent (e.g. a per-request random value).
  Sampler(SamplingParams params, uint64_t fallback_seed, const std::vector<int32_t>& prompt);

  // Picks the next token from `logits` [vocab] (modified in place) and records it.
  int32_t Sample(float* logits, int64_t vocab);
  const SamplingParams& params() const { return params_; }
  // Whether Sample changes logits before choosing (constraint, bias or penalties).
  bool ModifiesLogits() const;
  // Whether a constraint masks the logits (such rows are sampled on the host).
  bool constrained() const { return matcher_ != nullptr; }
  // The ids the next draw may not pick because of min_tokens (empty once enough were drawn, and
  // under a constraint that decides itself where the output may end).
  const std::vector<int32_t>& blocked_stop_ids() const;
  // TokenMatcher::Prepare for the next draw (nothing without a constraint).
  void PrepareConstraint(int64_t vocab) {
    if (matcher_) matcher_->Prepare(vocab);
  }

  // Sampling elsewhere (the CUDA executor's device sampler, kernels/cuda/sampling.h):
  // NextUniform() draws the uniform Sample would draw (none when greedy: returns 0), the
  // device applies the penalties of PenaltyHistory() with the same rules, and Accept() records
  // the token chosen with that uniform — leaving the sampler exactly as Sample would.
  double NextUniform();
  void Accept(int32_t token) { Record(token, /*output=*/true); }
  // The tokens the penalties touch, each once: prompt and output tokens when
  // repetition_penalty is on (it applies to every one), else the output tokens when presence /
  // frequency penalties are on (empty when no penalty is on). Kept only once asked for (the
  // first call lists what the penalty arrays hold, later tokens are appended as recorded), so
  // samplers used only on the host carry no list.
  const std::vector<int32_t>& penalized_ids();
  // How often `token` was generated (0 when presence / frequency penalties are off).
  int32_t output_count(int32_t token) const {
    const auto id = static_cast<size_t>(token);
    return id < output_counts_.size() ? output_counts_[id] : 0;
  }
  // Sample with the uniform a NextUniform() call already drew (a device pick handed back to
  // the host: its draw lay beyond the ranks the device looked at). Same token and state as
  // Sample; Sample(logits, vocab) is SampleWithUniform(logits, vocab, NextUniform()).
  // `scratch`: the draw's working memory (null: the calling thread's).
  int32_t SampleWithUniform(float* logits, int64_t vocab, double u,
                            SampleScratch* scratch = nullptr);

 private:
  void SizeForVocab(int64_t vocab);
  void ApplyPenalties(float* logits, int64_t vocab) const;
  // A draw with uniform u from the `keep` best tokens (top-k, or the whole vocabulary).
  int32_t Draw(const float* logits, int64_t vocab, int64_t keep, double u,
               SampleScratch& scratch) const;
  // Remembers a prompt (output = false) or generated token for the penalties.
  void Record(int32_t token, bool output);
  bool CountsOutputs() const {
    return params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  }

  SamplingParams params_;
  Rng rng_;
  std::vector<int32_t>
      output_counts_;               // [≥ max id] generated tokens (presence/frequency), or empty
  std::vector<uint8_t> seen_mask_;  // [≥ max id] prompt + output ids (repetition), or empty
  std::vector<int32_t> penalized_ids_;  // see penalized_ids()
  bool track_penalized_ids_ = false;
  std::unique_ptr<TokenMatcher> matcher_;  // from params_.constraint, or null
  bool matcher_decides_end_ = false;       // params_.constraint->DecidesEnd()
  int64_t num_generated_ = 0;
};

}  // namespace strata::engine
