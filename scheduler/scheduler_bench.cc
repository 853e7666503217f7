// Scheduler overhead per engine step: Schedule() + Commit() with N running sequences all in
// decode (prefix caching and KDA checkpoints on, 1,000-token prompts, 64-token blocks). The
// executor is replaced by a prebuilt StepResult, so only the scheduler's own work is timed.
// Target (issue 5): well under 5% of a real decode step; aim for tens of microseconds at 256.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/check.h"
#include "scheduler/ngram_proposer.h"
#include "scheduler/scheduler.h"

namespace strata::scheduler {
namespace {

constexpr int kPromptTokens = 1000;

SchedulerConfig BenchConfig(int num_seqs) {
  SchedulerConfig c;
  c.max_num_seqs = num_seqs;
  c.max_num_batched_tokens = 8192;
  c.max_model_len = 16384;
  c.block_size = 64;
  c.num_blocks = num_seqs * (16384 / 64);
  c.num_slots = num_seqs;
  c.num_checkpoint_slots = 64;
  c.checkpoint_every_n_blocks = 16;
  return c;
}

// A result sampling `token` for every sequence of `plan`.
engine::StepResult ResultFor(const engine::StepPlan& plan, int32_t token) {
  engine::StepResult result;
  result.step_id = plan.step_id;
  for (const auto& s : plan.sequences) {
    if (s.sample) result.sampled.push_back({s.seq_id, token, -0.5f, {}});
  }
  return result;
}

// Adds num_seqs requests and steps until every one of them decodes.
void FillWithDecodes(Scheduler* scheduler, int num_seqs, std::mt19937* rng) {
  for (int i = 0; i < num_seqs; ++i) {
    Request r;
    r.request_id = absl::StrCat("cmpl-", 100000000 + i, "-benchmark-request");
    for (int t = 0; t < kPromptTokens; ++t) {
      r.prompt.push_back(static_cast<int32_t>((*rng)() % 160000));
    }
    r.max_tokens = 16384 - kPromptTokens;
    r.eos_token_id = 163586;
    CHECK(scheduler->Add(std::move(r)).ok());
  }
  while (true) {
    engine::StepPlan plan = scheduler->Schedule();
    bool all_decode = static_cast<int>(plan.sequences.size()) == num_seqs;
    for (const auto& s : plan.sequences) all_decode = all_decode && s.token_ids.size() == 1;
    scheduler->Commit(ResultFor(plan, 7));
    if (all_decode) return;
  }
}

void BM_ScheduleCommitDecode(benchmark::State& state) {
  const int num_seqs = static_cast<int>(state.range(0));
  std::mt19937 rng(1);
  auto scheduler = std::make_unique<Scheduler>(BenchConfig(num_seqs));
  FillWithDecodes(scheduler.get(), num_seqs, &rng);
  engine::StepResult result;
  int64_t steps_left = 16384 - kPromptTokens - 64;  // before any sequence can finish
  for (auto _ : state) {
    if (--steps_left == 0) {  // start over with fresh sequences (rare; not timed)
      state.PauseTiming();
      scheduler = std::make_unique<Scheduler>(BenchConfig(num_seqs));
      FillWithDecodes(scheduler.get(), num_seqs, &rng);
      steps_left = 16384 - kPromptTokens - 64;
      state.ResumeTiming();
    }
    engine::StepPlan plan = scheduler->Schedule();
    if (result.sampled.size() != plan.sequences.size()) result = ResultFor(plan, 11);
    result.step_id = plan.step_id;
    std::vector<SequenceEvent> events = scheduler->Commit(result);
    benchmark::DoNotOptimize(events.data());
  }
  state.counters["seqs"] = num_seqs;
}
BENCHMARK(BM_ScheduleCommitDecode)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);

// Speculative decoding's proposer per decode step of one sequence with a context of N tokens
// (Zipf-like token frequencies, lookup 2..5, 4 drafts): the full scan (ProposeNgramDraft) and
// the incremental index the scheduler keeps per sequence (its one-off build over the context
// is not timed; each iteration appends one token, as a decode step does).
std::vector<int32_t> ZipfTokens(int64_t n) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t& t : tokens) t = static_cast<int32_t>(std::exp(u(rng) * std::log(100000.0)));
  return tokens;
}

void BM_NgramScan(benchmark::State& state) {
  const std::vector<int32_t> tokens = ZipfTokens(state.range(0));
  std::vector<int32_t> draft;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ProposeNgramDraft(tokens, 2, 5, 4, &draft));
  }
}
BENCHMARK(BM_NgramScan)->Arg(32768)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);

constexpr int kIndexSteps = 20000;  // decode steps timed (new tokens appended)

void BM_NgramIndex(benchmark::State& state) {
  const std::vector<int32_t> all = ZipfTokens(state.range(0) + kIndexSteps);
  std::vector<int32_t> tokens(all.begin(), all.begin() + state.range(0));
  NgramIndex index(2, 5);
  std::vector<int32_t> draft;
  index.Propose(tokens, 4, &draft);
  size_t next = tokens.size();
  for (auto _ : state) {
    tokens.push_back(all[next++]);
    benchmark::DoNotOptimize(index.Propose(tokens, 4, &draft));
  }
}
BENCHMARK(BM_NgramIndex)
    ->Arg(32768)
    ->Arg(1 << 20)
    ->Iterations(kIndexSteps)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata::scheduler

BENCHMARK_MAIN();
