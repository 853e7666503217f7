#include "engine/step_sampling.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::engine {

void PrepareConstraints(const StepPlan& plan, int64_t vocab, bool parallel) {
  // Sequences are few and their masks uneven: one task each. (The list is the calling thread's;
  // the tasks use it through a reference, never through the thread_local name.)
  thread_local std::vector<Sampler*> scratch;
  std::vector<Sampler*>& constrained = scratch;
  constrained.clear();
  for (const ScheduledSequence& seq : plan.sequences) {
    if (seq.sample && !seq.token_ids.empty() && seq.sampler && seq.sampler->constrained()) {
      constrained.push_back(seq.sampler.get());
    }
  }
  if (constrained.empty()) return;
  kernels::cpu::ParallelFor(static_cast<int64_t>(constrained.size()),
                            parallel && constrained.size() > 1, [&constrained, vocab](int64_t i) {
                              constrained[static_cast<size_t>(i)]->PrepareConstraint(vocab);
                            });
}

void ScoreTargets(const ScheduledSequence& seq, const float* logits, int64_t vocab,
                  ScoredSequence* out) {
  const int64_t rows = static_cast<int64_t>(seq.score_targets.size());
  const int64_t n = std::min<int64_t>(std::max(seq.num_score_logprobs, 0), vocab);
  out->seq_id = seq.seq_id;
  out->scores.resize(static_cast<size_t>(rows));
  kernels::cpu::ParallelFor(rows, rows > 1, [&](int64_t i) {
    const float* row = logits + i * vocab;
    const int32_t target = seq.score_targets[static_cast<size_t>(i)];
    CHECK(target >= 0 && target < vocab) << "score target " << target << " of " << seq.seq_id;
    TokenScore& score = out->scores[static_cast<size_t>(i)];
    const double log_z = kernels::cpu::LogSumExp(row, vocab);
    const float x = row[target];
    int64_t rank = 0;
    for (int64_t j = 0; j < vocab; ++j) rank += row[j] >= x ? 1 : 0;
    score.token_id = target;
    score.logprob = static_cast<float>(double(x) - log_z);
    score.rank = std::max<int64_t>(rank, 1);  // a NaN logit compares false everywhere
    score.top.clear();
    if (n == 0) return;
    thread_local std::vector<kernels::cpu::ScoredId> scratch;
    scratch.resize(static_cast<size_t>(kernels::cpu::TopKScratchSize(n)));
    kernels::cpu::TopK(row, vocab, n, scratch.data());
    for (int64_t k = 0; k < n; ++k) {
      const kernels::cpu::ScoredId& c = scratch[static_cast<size_t>(k)];
      score.top.push_back({c.id, static_cast<float>(double(c.value) - log_z)});
    }
  });
}

void StepSampler::Sample(const ScheduledSequence& seq, float* logits, int64_t vocab,
                         SampledToken* out, SampleScratch* scratch) {
  CHECK(seq.sampler != nullptr) << "sequence " << seq.seq_id << " has no sampler";
  SampleWithUniform(seq, logits, vocab, seq.sampler->NextUniform(), out, scratch);
}

namespace {

// For callers that bring no scratch. A function of its own: a thread_local is constructed (and
// its destructor registered, which allocates) when control first passes its declaration.
SampleScratch& ThreadStepScratch() {
  thread_local SampleScratch scratch;
  return scratch;
}

}  // namespace

void StepSampler::SampleWithUniform(const ScheduledSequence& seq, float* logits, int64_t vocab,
                                    double u, SampledToken* out, SampleScratch* scratch) {
  CHECK(seq.sampler != nullptr) << "sequence " << seq.seq_id << " has no sampler";
  out->seq_id = seq.seq_id;
  out->logprob = 0.0f;
  out->top_logprobs.clear();
  if (seq.num_logprobs < 0) {
    out->token_id = seq.sampler->SampleWithUniform(logits, vocab, u, scratch);
    return;
  }
  SampleScratch& s = scratch != nullptr ? *scratch : ThreadStepScratch();
  const double log_z = kernels::cpu::LogSumExp(logits, vocab);
  const int64_t n = std::min<int64_t>(seq.num_logprobs, vocab);
  if (n > 0) {
    const size_t need = static_cast<size_t>(kernels::cpu::TopKScratchSize(n));
    if (s.top.size() < need) s.top.resize(need);
    kernels::cpu::TopK(logits, vocab, n, s.top.data());
    for (int64_t i = 0; i < n; ++i) {
      const kernels::cpu::ScoredId& c = s.top[static_cast<size_t>(i)];
      out->top_logprobs.push_back({c.id, static_cast<float>(double(c.value) - log_z)});
    }
  }
  const float* raw = logits;
  if (seq.sampler->ModifiesLogits()) {
    if (s.raw_logits.size() < static_cast<size_t>(vocab)) s.raw_logits.resize(vocab);
    std::memcpy(s.raw_logits.data(), logits, static_cast<size_t>(vocab) * sizeof(float));
    raw = s.raw_logits.data();
  }
  out->token_id = seq.sampler->SampleWithUniform(logits, vocab, u, &s);
  out->logprob = static_cast<float>(double(raw[out->token_id]) - log_z);
}

}  // namespace strata::engine
