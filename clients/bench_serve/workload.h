// What the load generator sends and when: the requests of a benchmark (datasets) and their
// arrival times (vLLM's `bench serve` semantics, so runs compare across servers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace strata::bench_serve {

// One request: token ids (completions) or text (chat, or a dataset's prompts), the length the
// server will count, and the tokens to ask for (max_tokens).
struct BenchRequest {
  std::vector<int32_t> prompt_ids;  // empty: `prompt_text` is sent
  std::string prompt_text;
  int64_t prompt_len = 0;
  int64_t output_len = 0;
};

// vLLM's "random" dataset: `num` prompts of random token ids in [0, vocab_size), lengths drawn
// uniformly from input_len·[1 − range_ratio, 1 + range_ratio] (outputs likewise), each after
// the same `prefix_len` random ids (a shared system prompt: what prefix caching serves). The
// same seed gives the same requests.
struct RandomDataset {
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 0.0;  // in [0, 1)
  int64_t prefix_len = 0;
  int64_t vocab_size = 0;
  uint64_t seed = 0;
};
absl::StatusOr<std::vector<BenchRequest>> RandomRequests(const RandomDataset& d);

// A ShareGPT JSON file (a list of {"conversations": [{"from": "human", "value": …},
// {"from": "gpt", "value": …}, …]}): the first human turn of each conversation with at least two
// turns is a prompt; its reply's length (in tokens, via `count_tokens`) the output length unless
// `fixed_output_len` > 0. Conversations are shuffled with `seed`; the first `num_prompts` whose
// prompt has ≥ 4 tokens and whose prompt + output ≤ max_total_len are kept (vLLM's filter,
// max_total_len 2048 there).
struct ShareGptDataset {
  std::string path;
  int64_t num_prompts = 1000;
  int64_t fixed_output_len = 0;
  int64_t max_total_len = 2048;
  uint64_t seed = 0;
};
using TokenCounter = absl::FunctionRef<absl::StatusOr<int64_t>(const std::string& text)>;
absl::StatusOr<std::vector<BenchRequest>> ShareGptRequests(const ShareGptDataset& d,
                                                           TokenCounter count_tokens);

// Arrival times in seconds from the start, non-decreasing: a gamma process with mean
// 1 / request_rate between arrivals and shape `burstiness` (1: Poisson; < 1 burstier, > 1 more
// regular), or all 0 for an infinite rate (request_rate ≤ 0 or +inf).
std::vector<double> ArrivalTimes(int64_t num, double request_rate, double burstiness,
                                 uint64_t seed);

}  // namespace strata::bench_serve
