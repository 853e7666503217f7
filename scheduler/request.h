// Request: what the front end hands the scheduler (token ids, sampling and stop criteria), and
// SequenceEvent: what the scheduler hands back per step per sequence. Plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/media_embedding.h"
#include "engine/sampling.h"
#include "engine/step.h"

namespace strata::scheduler {

using engine::SequenceId;

inline constexpr int kMaxPromptLogprobs = 1000;

struct Request {
  std::string request_id;       // unique among live requests
  std::vector<int32_t> prompt;  // token ids, non-empty
  // Images in the prompt: rows at their (expanded) placeholder positions, ascending
  // (engine/media_embedding.h). Their content keys enter the block hashes.
  std::vector<engine::MediaEmbedding> media;
  engine::SamplingParams sampling;
  int64_t max_tokens = 16;              // output tokens at most, >= 1
  std::vector<int32_t> stop_token_ids;  // end the sequence (kStop) even with ignore_eos
  int64_t eos_token_id = -1;            // < 0: none
  bool ignore_eos = false;
  int priority = 0;         // kPriority policy: lower is served first (vLLM)
  uint64_t cache_salt = 0;  // prefix-cache namespace (tenant, media; block_hash.h)
  int num_logprobs = -1;    // >= 0: return logprobs of the sampled token (+ top n)
  // >= 0: score the prompt (vLLM's prompt_logprobs): every prompt token after the first gets
  // its log-probability, rank and the top n (at most kMaxPromptLogprobs), delivered with the
  // first output token. Such a request skips the prefix cache (every position is computed).
  int prompt_logprobs = -1;
  uint64_t fallback_seed = 0;  // sampler seed when sampling.seed is absent
  // The engine loop streams the prompt's prefill progress (StreamEvent::progress, one event per
  // prefill chunk) ahead of the first token (llama.cpp's return_progress). The scheduler
  // ignores it.
  bool report_prefill_progress = false;
};

enum class FinishReason : uint8_t {
  kStop,    // EOS (unless ignore_eos) or one of stop_token_ids was sampled
  kLength,  // max_tokens output tokens
  kAbort,   // Abort() (client gone, stop string found by the detokenizer, shutdown)
};

// The one name of each reason, as clients (OpenAI's finish_reason), logs and metrics show it.
constexpr const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "abort";  // not an enumerator: nothing ended it normally
}

// One sequence's news from one step: a new token, the end, or both.
struct SequenceEvent {
  std::string request_id;
  SequenceId seq_id = 0;
  std::optional<int32_t> token;  // the newly sampled token (absent on abort)
  float logprob = 0.0f;          // of `token`, when the request asked for logprobs
  std::vector<engine::TokenLogprob> top_logprobs;
  // With the first output token of a request with prompt_logprobs >= 0: scores of prompt
  // tokens 1 .. n−1 (token 0 has no context to be scored in).
  std::vector<engine::TokenScore> prompt_scores;
  std::optional<FinishReason> finished;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;  // prompt tokens served by the prefix cache at first admission
  int64_t num_output_tokens = 0;  // output tokens so far, including `token`
};

}  // namespace strata::scheduler
