// Sampling of one scheduled sequence's logits row, shared by every executor (the CPU executor
// and the CUDA executor, which copies the rows it samples to the host): the sequence's own
// Sampler picks the token; log-probabilities, when requested, are of the raw model
// distribution (vLLM's default): log-softmax of the row before the sampler's penalties, the top
// n ranked by logit (ties by id).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/step.h"
#include "kernels/cpu/sampling.h"

namespace strata::engine {

// Prepares the constraint masks of every constrained sequence `plan` samples (Sampler::
// PrepareConstraint), spread over kernels/cpu's thread pool when `parallel`. Executors call it
// before sampling: the CPU one after the forward, the CUDA one while the device runs it.
void PrepareConstraints(const StepPlan& plan, int64_t vocab, bool parallel);

// Scores seq.score_targets: row i of `logits` ([score_targets.size(), vocab], raw) scores
// target i (TokenScore), rows spread over kernels/cpu's thread pool. Shared by the executors.
void ScoreTargets(const ScheduledSequence& seq, const float* logits, int64_t vocab,
                  ScoredSequence* out);

// Speculative decoding (ScheduledSequence::num_draft_tokens): whether `token`, sampled at the
// row `back` rows before the sequence's last, ends its verification — the last row, or a token
// other than the draft that row verifies (new token n − back). The rows after it are not sampled.
inline bool EndsDraftVerification(const ScheduledSequence& seq, int32_t back, int32_t token) {
  return back == 0 || token != seq.token_ids[seq.token_ids.size() - static_cast<size_t>(back)];
}

// Stateless: one StepSampler may sample different sequences on several threads at once (each
// sequence's Sampler is its own: RNG stream, penalty history), each with its own scratch.
class StepSampler {
 public:
  // Samples `seq` from `logits` [vocab] (modified in place by the sampler's penalties) into
  // `out`, reusing out->top_logprobs' capacity. No heap allocation once `scratch` (null: the
  // calling thread's) has grown to the largest vocab / logprob count seen.
  void Sample(const ScheduledSequence& seq, float* logits, int64_t vocab, SampledToken* out,
              SampleScratch* scratch = nullptr);
  // The same with the uniform a seq.sampler->NextUniform() call already drew (a row a device
  // sampler handed back); Sample draws it itself.
  void SampleWithUniform(const ScheduledSequence& seq, float* logits, int64_t vocab, double u,
                         SampledToken* out, SampleScratch* scratch = nullptr);
};

}  // namespace strata::engine
