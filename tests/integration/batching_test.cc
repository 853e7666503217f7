// Continuous batching end to end: scheduler + CpuExecutor + the model on generated tiny
// checkpoints. Batched runs (chunked prefill, preemption forced by a tiny cache, prefix hits)
// must produce exactly the greedy tokens of each request run alone, logprobs within f32
// rounding, and return every page and slot to the pools.
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <omp.h>

#include "engine/demo/checkpoint_generator.h"
#include "engine/executor.h"
#include "engine/generator.h"
#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/engine_loop.h"

namespace strata {
namespace {

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<engine::TokenScore> prompt_scores;
  int64_t cached_tokens = 0;
  bool finished = false;
};

class BatchingTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/batching_" + GetParam() + "_" + std::to_string(::getpid());
    engine::demo::GeneratorOptions options;
    options.family = GetParam();
    options.preset = "tiny";
    options.seed = 5;
    auto generated = engine::demo::GenerateCheckpoint(options, dir_);
    ASSERT_TRUE(generated.ok()) << generated.status();
    auto model = engine::Model::Load(dir_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A cache of `num_blocks` pages of `block_size` tokens, `num_slots` slots.
  kvcache::CacheLayout Layout(int32_t num_blocks, int block_size, int32_t num_slots,
                              int32_t num_checkpoints,
                              LatentDType latent_dtype = LatentDType::kF32) const {
    return kvcache::LayoutWithPools(engine::CacheSpecFor(model_->config(), latent_dtype),
                                    block_size, num_blocks, num_slots, num_checkpoints);
  }

  scheduler::SchedulerConfig Config(const kvcache::CacheLayout& layout, int32_t max_seqs,
                                    int64_t token_budget, int64_t max_model_len) const {
    scheduler::SchedulerConfig c;
    c.max_num_seqs = max_seqs;
    c.max_num_batched_tokens = token_budget;
    c.max_model_len = max_model_len;
    c.block_size = layout.block_size;
    c.num_blocks = layout.num_blocks;
    c.num_slots = layout.num_slots;
    c.num_checkpoint_slots = layout.num_checkpoints;
    c.checkpoint_every_n_blocks = 2;
    c.has_kda_layers = layout.num_kda_layers > 0;
    return c;
  }

  scheduler::Request Greedy(const std::string& id, std::vector<int32_t> prompt,
                            int64_t max_tokens) const {
    scheduler::Request r;
    r.request_id = id;
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0.0f;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.num_logprobs = 0;
    return r;
  }

  // Runs every request to completion, stepping synchronously; checks invariants each step.
  std::map<std::string, Output> Drive(scheduler::Scheduler& sched, engine::CpuExecutor& exec,
                                      const std::vector<scheduler::Request>& requests,
                                      int64_t* num_preemptions = nullptr) {
    std::map<std::string, Output> out;
    for (const auto& r : requests) {
      auto added = sched.Add(r);
      EXPECT_TRUE(added.ok()) << added.status();
    }
    for (int step = 0; sched.HasWork(); ++step) {
      EXPECT_LT(step, 100000) << "no progress";
      if (step >= 100000) break;
      engine::StepPlan plan = sched.Schedule();
      engine::StepResult result = exec.Execute(plan);
      for (const auto& e : sched.Commit(result)) {
        Output& o = out[e.request_id];
        if (e.token) {
          o.tokens.push_back(*e.token);
          o.logprobs.push_back(e.logprob);
        }
        if (!e.prompt_scores.empty()) {
          EXPECT_TRUE(o.prompt_scores.empty()) << e.request_id << ": scores delivered twice";
          EXPECT_EQ(o.tokens.size(), 1u) << e.request_id << ": scores after the first token";
          o.prompt_scores = e.prompt_scores;
        }
        o.cached_tokens = e.num_cached_tokens;
        if (e.finished) o.finished = true;
      }
      EXPECT_TRUE(sched.CheckInvariants().ok()) << sched.CheckInvariants();
    }
    if (num_preemptions) *num_preemptions = sched.stats().num_preempted_total;
    return out;
  }

  std::vector<int32_t> RandomPrompt(std::mt19937& rng, int len) const {
    std::uniform_int_distribution<int32_t> id(
        0, static_cast<int32_t>(model_->config().vocab_size) - 1);
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (auto& t : p) t = id(rng);
    return p;
  }

  std::vector<int32_t> Solo(const std::vector<int32_t>& prompt, int64_t max_tokens) const {
    engine::GenerateOptions options;
    options.max_tokens = max_tokens;
    options.ignore_eos = true;
    options.sampling.temperature = 0.0f;
    auto tokens = engine::Generate(*model_, prompt, options);
    EXPECT_TRUE(tokens.ok()) << tokens.status();
    return tokens.value_or(std::vector<int32_t>{});
  }

  std::string dir_;
  std::unique_ptr<engine::Model> model_;
};

TEST_P(BatchingTest, BatchedWithChunkingAndPreemptionEqualsEachRequestAlone) {
  std::mt19937 rng(11);
  std::vector<scheduler::Request> requests;
  const std::vector<int> lengths = {1, 5, 17, 33, 60, 9, 41, 2};
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::vector<int32_t> prompt;
    // Requests 4..7 extend request 3's prompt: admitted later, they hit its prefix cache.
    if (i >= 4) prompt = requests[3].prompt;
    for (int32_t t : RandomPrompt(rng, lengths[i])) prompt.push_back(t);
    requests.push_back(Greedy("r" + std::to_string(i), prompt, 12));
  }
  // 15 blocks of 8 tokens = 120 token positions shared by 8 sequences of up to 105 tokens:
  // preemption is unavoidable; a budget of 24 tokens splits every long prompt into chunks.
  const kvcache::CacheLayout small = Layout(15, 8, 4, 4);
  scheduler::Scheduler sched(Config(small, 4, 24, 120));
  engine::CpuExecutor exec(*model_, small);
  int64_t preemptions = 0;
  auto batched = Drive(sched, exec, requests, &preemptions);
  EXPECT_GT(preemptions, 0) << "the cache was meant to force preemption";
  EXPECT_GT(sched.stats().num_prefix_hits, 0) << "requests 4..7 were meant to hit the prefix cache";

  // Each request alone through the same path with a roomy cache, and through Generate().
  for (const auto& r : requests) {
    const kvcache::CacheLayout roomy = Layout(32, 8, 1, 4);
    scheduler::Scheduler solo_sched(Config(roomy, 1, 1024, 256));
    ASSERT_LE(static_cast<int64_t>(r.prompt.size()) + r.max_tokens, 128);
    engine::CpuExecutor solo_exec(*model_, roomy);
    auto alone = Drive(solo_sched, solo_exec, {r});
    const Output& b = batched[r.request_id];
    const Output& a = alone[r.request_id];
    ASSERT_TRUE(b.finished) << r.request_id;
    EXPECT_EQ(b.tokens, a.tokens) << r.request_id;
    EXPECT_EQ(b.tokens, Solo(r.prompt, r.max_tokens)) << r.request_id;
    ASSERT_EQ(b.logprobs.size(), a.logprobs.size());
    for (size_t i = 0; i < b.logprobs.size(); ++i) {
      EXPECT_NEAR(b.logprobs[i], a.logprobs[i], 1e-4f) << r.request_id << " token " << i;
    }
  }
  EXPECT_EQ(sched.stats().num_running, 0);
  EXPECT_TRUE(sched.CheckInvariants().ok());
}

// Sampled (not greedy) requests — temperature, top-k / top-p / min-p, penalties, logit bias,
// logprobs, each its own seed — draw in a batch exactly what each draws alone, on one thread
// or several: the executor samples the batch's sequences as parallel pool tasks, and each
// sequence's Sampler (its RNG stream, its penalty history) is its own.
TEST_P(BatchingTest, SeededSamplingInABatchEqualsEachRequestAloneOnAnyThreadCount) {
  std::mt19937 rng(41);
  std::vector<scheduler::Request> requests;
  for (int i = 0; i < 8; ++i) {
    scheduler::Request r = Greedy("t" + std::to_string(i), RandomPrompt(rng, 3 + 5 * i), 16);
    r.sampling.temperature = 0.6f + 0.2f * static_cast<float>(i % 4);
    r.sampling.seed = 1000 + i;
    if (i % 4 == 1) r.sampling.top_k = 20;
    if (i % 4 == 2) r.sampling.top_p = 0.8f;
    if (i % 4 == 3) r.sampling.min_p = 0.05f;
    if (i % 3 == 0) r.sampling.repetition_penalty = 1.3f;
    if (i % 3 == 1) r.sampling.frequency_penalty = 0.5f;
    if (i % 2 == 0) r.sampling.logit_bias.push_back({static_cast<int32_t>(7 * i), 3.0f});
    r.num_logprobs = i % 3;
    requests.push_back(r);
  }
  const kvcache::CacheLayout layout = Layout(40, 8, 8, 4);
  const int threads_before = omp_get_max_threads();
  std::map<std::string, Output> alone;
  for (const auto& r : requests) {
    scheduler::Scheduler solo_sched(Config(layout, 1, 1024, 256));
    engine::CpuExecutor solo_exec(*model_, layout);
    alone[r.request_id] = Drive(solo_sched, solo_exec, {r})[r.request_id];
  }
  for (const int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    scheduler::Scheduler sched(Config(layout, 8, 64, 256));
    engine::CpuExecutor exec(*model_, layout);
    auto batched = Drive(sched, exec, requests);
    for (const auto& r : requests) {
      const Output& b = batched[r.request_id];
      const Output& a = alone[r.request_id];
      ASSERT_TRUE(b.finished) << r.request_id << ", " << threads << " threads";
      EXPECT_EQ(b.tokens, a.tokens) << r.request_id << ", " << threads << " threads";
      ASSERT_EQ(b.logprobs.size(), a.logprobs.size());
      for (size_t i = 0; i < b.logprobs.size(); ++i) {
        EXPECT_NEAR(b.logprobs[i], a.logprobs[i], 1e-4f) << r.request_id << " token " << i;
      }
    }
  }
  omp_set_num_threads(threads_before);
  // The draws really were random: the sampled outputs are not all the greedy ones.
  int differ = 0;
  for (const auto& r : requests) {
    differ += alone[r.request_id].tokens != Solo(r.prompt, r.max_tokens) ? 1 : 0;
  }
  EXPECT_GT(differ, 0);
}

// Prompt scores (prompt_logprobs) of requests batched with chunking (a score budget of 10
// positions a step), preemption and shared prefixes equal the log-softmax of the whole prompt's
// logits from one forward (`strata logits`' path), computed here in double.
TEST_P(BatchingTest, PromptScoresEqualTheWholePromptsLogits) {
  std::mt19937 rng(23);
  std::vector<scheduler::Request> requests;
  const std::vector<int> lengths = {1, 7, 37, 50, 12};
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::vector<int32_t> prompt;
    if (i == 4) prompt = requests[3].prompt;  // shares a cached prefix, must not use it
    for (int32_t t : RandomPrompt(rng, lengths[i])) prompt.push_back(t);
    scheduler::Request r = Greedy("s" + std::to_string(i), prompt, 6);
    r.prompt_logprobs = i == 1 ? 0 : 3;
    requests.push_back(r);
  }
  requests.push_back(Greedy("plain", RandomPrompt(rng, 30), 20));  // decodes beside the scoring
  const kvcache::CacheLayout small = Layout(16, 8, 4, 4);
  scheduler::SchedulerConfig config = Config(small, 4, 24, 128);
  config.max_scored_tokens_per_step = 10;
  scheduler::Scheduler sched(config);
  engine::CpuExecutor exec(*model_, small);
  int64_t preemptions = 0;
  auto out = Drive(sched, exec, requests, &preemptions);
  EXPECT_GT(preemptions, 0) << "the cache was meant to force preemption";

  const int64_t vocab = model_->config().vocab_size;
  for (const scheduler::Request& r : requests) {
    const Output& o = out[r.request_id];
    ASSERT_TRUE(o.finished) << r.request_id;
    EXPECT_EQ(o.tokens, Solo(r.prompt, r.max_tokens)) << r.request_id;
    if (r.prompt_logprobs < 0) {
      EXPECT_TRUE(o.prompt_scores.empty());
      continue;
    }
    ASSERT_EQ(o.prompt_scores.size(), r.prompt.size() - 1) << r.request_id;
    EXPECT_EQ(o.cached_tokens, 0) << r.request_id << ": scoring skips the prefix cache";
    auto logits = engine::PromptLogits(*model_, r.prompt, static_cast<int64_t>(r.prompt.size()));
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (size_t p = 0; p + 1 < r.prompt.size(); ++p) {
      const float* row = logits->data() + static_cast<int64_t>(p) * vocab;
      const int32_t target = r.prompt[p + 1];
      double max = row[0], sum = 0.0;
      for (int64_t j = 0; j < vocab; ++j) max = std::max<double>(max, row[j]);
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(double(row[j]) - max);
      const double log_z = max + std::log(sum);
      int64_t rank = 0;
      for (int64_t j = 0; j < vocab; ++j) rank += row[j] >= row[target] ? 1 : 0;
      std::vector<int32_t> order(static_cast<size_t>(vocab));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [row](int32_t a, int32_t b) { return row[a] > row[b]; });
      const engine::TokenScore& got = o.prompt_scores[p];
      const std::string where = r.request_id + " position " + std::to_string(p + 1);
      EXPECT_EQ(got.token_id, target) << where;
      EXPECT_NEAR(got.logprob, double(row[target]) - log_z, 1e-4) << where;
      EXPECT_NEAR(static_cast<double>(got.rank), static_cast<double>(rank), 1.0) << where;
      ASSERT_EQ(got.top.size(), static_cast<size_t>(r.prompt_logprobs)) << where;
      for (size_t k = 0; k < got.top.size(); ++k) {
        EXPECT_NEAR(got.top[k].logprob, double(row[order[k]]) - log_z, 1e-4) << where;
      }
    }
  }
  EXPECT_TRUE(sched.CheckInvariants().ok());
}

TEST_P(BatchingTest, PrefixHitGivesTheColdOutputAndReportsCachedTokens) {
  std::mt19937 rng(3);
  const std::vector<int32_t> shared = RandomPrompt(rng, 40);
  std::vector<int32_t> first = shared, second = shared;
  for (int32_t t : RandomPrompt(rng, 7)) first.push_back(t);
  for (int32_t t : RandomPrompt(rng, 5)) second.push_back(t);

  const kvcache::CacheLayout layout = Layout(64, 8, 2, 8);
  scheduler::Scheduler sched(Config(layout, 2, 256, 256));
  engine::CpuExecutor exec(*model_, layout);
  auto warm = Drive(sched, exec, {Greedy("a", first, 8)});
  auto hit = Drive(sched, exec, {Greedy("b", second, 8)});
  const bool has_kda = model_->geometry().num_kda_layers > 0;
  // `first` (47 tokens) left KDA checkpoints every 2 blocks of 8 (16, 32) and at its
  // block-aligned prompt end (40); `second` shares exactly its first 40 tokens.
  EXPECT_EQ(hit["b"].cached_tokens, 40) << "kda=" << has_kda;
  EXPECT_EQ(hit["b"].tokens, Solo(second, 8));
  EXPECT_EQ(warm["a"].tokens, Solo(first, 8));
}

TEST_P(BatchingTest, TwoHundredRandomRequestsThroughASmallCacheAllFinishCorrectly) {
  std::mt19937 rng(17);
  const kvcache::CacheLayout layout = Layout(24, 8, 6, 6);
  scheduler::SchedulerConfig config = Config(layout, 6, 48, 160);
  auto loop = std::make_unique<server::EngineLoop>(
      std::make_unique<scheduler::Scheduler>(config),
      std::make_unique<engine::CpuExecutor>(*model_, layout), server::EngineLoopOptions{});
  loop->Start();
  const std::vector<int32_t> common = RandomPrompt(rng, 24);  // shared prefix of many requests
  std::vector<scheduler::Request> requests;
  std::vector<std::shared_ptr<server::RequestStream>> streams;
  for (int i = 0; i < 200; ++i) {
    std::vector<int32_t> prompt;
    if (i % 3 == 0) prompt = common;
    for (int32_t t : RandomPrompt(rng, 1 + static_cast<int>(rng() % 40))) prompt.push_back(t);
    requests.push_back(Greedy("q" + std::to_string(i), prompt, 1 + static_cast<int>(rng() % 10)));
    auto stream = loop->Submit(requests.back());
    ASSERT_TRUE(stream.ok()) << stream.status();
    streams.push_back(*stream);
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<int32_t> tokens;
    bool done = false;
    while (!done) {
      auto event = streams[i]->Next(absl::Seconds(120));
      ASSERT_TRUE(event.has_value()) << "request " << i << " timed out";
      ASSERT_TRUE(event->error.ok()) << event->error;
      tokens.insert(tokens.end(), event->token_ids.begin(), event->token_ids.end());
      done = event->terminal();
      if (done) {
        EXPECT_EQ(event->finish, server::FinishReason::kLength);
      }
    }
    // Spot-check a third of the outputs against a solo run (all would take long on 2 cores).
    if (i % 3 == 1) {
      EXPECT_EQ(tokens, Solo(requests[i].prompt, requests[i].max_tokens)) << i;
    }
    EXPECT_EQ(static_cast<int64_t>(tokens.size()), requests[i].max_tokens) << i;
  }
  // All memory back: wait for the loop's stats of the final step (the streams end in the step's
  // dispatch, its scheduler stats are recorded just after: wait for both).
  auto settled = [&] {
    const server::EngineStats st = loop->stats();
    return st.num_unfinished == 0 && st.scheduler.num_running == 0 && st.scheduler.num_waiting == 0;
  };
  for (int i = 0; i < 500 && !settled(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  server::EngineStats stats = loop->stats();
  EXPECT_EQ(stats.num_unfinished, 0);
  EXPECT_EQ(stats.scheduler.num_running, 0);
  EXPECT_EQ(stats.scheduler.num_waiting, 0);
  EXPECT_GT(stats.scheduler.num_prefix_hits, 0);
  loop->Stop();
}

// bf16 and fp8 latent caches (--kv-cache-dtype): a request's tokens and prompt scores are the
// same batched (chunked prefill, preemption, prefix hits) as alone through the same kind of
// cache — the kernels read compressed rows the same way whatever the batch — and its prompt
// scores move away from the exact f32 cache's only by the format's rounding.
TEST_P(BatchingTest, CompressedLatentCachesBatchExactlyAndScoreCloseToF32) {
  std::mt19937 rng(29);
  std::vector<scheduler::Request> requests;
  const std::vector<int> lengths = {3, 37, 50, 12, 21, 9};
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::vector<int32_t> prompt;
    if (i >= 4) prompt = requests[2].prompt;  // plain requests that hit request 2's prefix
    for (int32_t t : RandomPrompt(rng, lengths[i])) prompt.push_back(t);
    scheduler::Request r = Greedy("c" + std::to_string(i), prompt, 8);
    if (i < 4) r.prompt_logprobs = 0;
    requests.push_back(r);
  }
  auto run = [&](LatentDType dtype, bool batched) {
    std::map<std::string, Output> out;
    if (batched) {
      const kvcache::CacheLayout small = Layout(16, 8, 4, 4, dtype);
      scheduler::Scheduler sched(Config(small, 4, 24, 128));
      engine::CpuExecutor exec(*model_, small);
      int64_t preemptions = 0;
      out = Drive(sched, exec, requests, &preemptions);
      EXPECT_GT(preemptions, 0) << LatentDTypeName(dtype);
      EXPECT_GT(sched.stats().num_prefix_hits, 0) << LatentDTypeName(dtype);
      return out;
    }
    for (const scheduler::Request& r : requests) {
      const kvcache::CacheLayout roomy = Layout(32, 8, 1, 0, dtype);
      scheduler::Scheduler sched(Config(roomy, 1, 1024, 256));
      engine::CpuExecutor exec(*model_, roomy);
      out[r.request_id] = Drive(sched, exec, {r})[r.request_id];
    }
    return out;
  };
  const auto exact = run(LatentDType::kF32, false);
  const bool has_mla = model_->geometry().num_mla_layers > 0;
  for (LatentDType dtype : {LatentDType::kBF16, LatentDType::kFP8}) {
    const auto batched = run(dtype, true);
    const auto alone = run(dtype, false);
    double max_diff = 0.0, sum_diff = 0.0;
    int64_t count = 0;
    for (const scheduler::Request& r : requests) {
      const std::string where = std::string(LatentDTypeName(dtype)) + " " + r.request_id;
      const Output& b = batched.at(r.request_id);
      const Output& a = alone.at(r.request_id);
      ASSERT_TRUE(b.finished) << where;
      EXPECT_EQ(b.tokens, a.tokens) << where;
      ASSERT_EQ(b.prompt_scores.size(), a.prompt_scores.size()) << where;
      const Output& f32 = exact.at(r.request_id);
      ASSERT_EQ(b.prompt_scores.size(), f32.prompt_scores.size()) << where;
      for (size_t p = 0; p < b.prompt_scores.size(); ++p) {
        // Not bit-exact: chunking changes the KDA prefill's f32 rounding (~1e-6), which can
        // move a value across a bf16/fp8 rounding boundary (a step of up to 1/16 for fp8).
        EXPECT_NEAR(b.prompt_scores[p].logprob, a.prompt_scores[p].logprob, 2e-3) << where;
        const double diff =
            std::fabs(double(b.prompt_scores[p].logprob) - double(f32.prompt_scores[p].logprob));
        max_diff = std::max(max_diff, diff);
        sum_diff += diff;
        ++count;
      }
    }
    ASSERT_GT(count, 0);
    // Measured on the tiny models (random weights, sharp attention): mean 2.5e-3 / 1.4e-2
    // (bf16, k3 / kimi-linear), 4.6e-2 / 4.0e-2 (fp8); the largest single change 0.85.
    const double mean_tolerance = dtype == LatentDType::kBF16 ? 0.04 : 0.15;
    EXPECT_LE(sum_diff / count, mean_tolerance) << LatentDTypeName(dtype);
    EXPECT_LE(max_diff, 2.0) << LatentDTypeName(dtype);
    std::printf("%s latent cache: prompt log-probabilities vs f32: max |diff| %.2e, mean %.2e\n",
                std::string(LatentDTypeName(dtype)).c_str(), max_diff, sum_diff / count);
    // The compressed cache is really in use: its rounding shows in the scores.
    if (has_mla) {
      EXPECT_GT(sum_diff, 0.0) << LatentDTypeName(dtype);
    }
  }
}

// Speculative decoding (prompt lookup) through the real executor: drafts verified in the
// forward, the KDA caches advanced by the kept tokens only — updated in place from a copy
// restored on a rejection, or (no copy budget) left untouched and replayed. Greedy and seeded
// sampled requests — batched, chunked, preempted, drafts accepted and rejected — give exactly
// the tokens of plain decoding (the sampler draws the same uniforms), with logprobs within f32
// rounding, both ways. A random-weight model rarely repeats itself, so each
// request biases two or three tokens (logit_bias): its output then mostly walks among them as
// the model's logits choose, and lookup drafts are often right and often wrong.
TEST_P(BatchingTest, SpeculativeDecodingGivesThePlainDecodingTokens) {
  std::mt19937 rng(31);
  std::vector<scheduler::Request> requests;
  for (int i = 0; i < 6; ++i) {
    // A phrase said four times: lookup drafts from the first decode step on.
    const std::vector<int32_t> phrase = RandomPrompt(rng, 3 + i);
    std::vector<int32_t> prompt;
    for (int r = 0; r < 4; ++r) prompt.insert(prompt.end(), phrase.begin(), phrase.end());
    scheduler::Request r = Greedy("s" + std::to_string(i), prompt, 40);
    for (int b = 0; b < 2 + i % 2; ++b) r.sampling.logit_bias.push_back({phrase[b], 8.0f});
    if (i % 2 == 1) {
      r.sampling.temperature = 0.7f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 100 + i;
    }
    requests.push_back(r);
  }
  // 20 blocks of 8 = 160 positions for 4 running sequences of up to 72: preemption happens.
  const kvcache::CacheLayout layout = Layout(20, 8, 8, 4);
  const scheduler::SchedulerConfig plain = Config(layout, 4, 32, 128);
  scheduler::SchedulerConfig spec = plain;
  spec.num_speculative_tokens = 4;
  spec.prompt_lookup_min = 1;
  spec.prompt_lookup_max = 3;

  scheduler::Scheduler plain_sched(plain);
  engine::CpuExecutor plain_exec(*model_, layout);
  auto want = Drive(plain_sched, plain_exec, requests);
  for (const bool copies : {true, false}) {
    const std::string how = copies ? "in place" : "replayed";
    scheduler::Scheduler spec_sched(spec);
    engine::CpuExecutor spec_exec(*model_, layout);
    spec_exec.set_kda_snapshot_budget(copies ? layout.TotalBytes() : 0);
    int64_t preemptions = 0;
    auto got = Drive(spec_sched, spec_exec, requests, &preemptions);

    for (const auto& r : requests) {
      const Output& g = got[r.request_id];
      const Output& w = want[r.request_id];
      ASSERT_TRUE(g.finished) << r.request_id << " " << how;
      EXPECT_EQ(g.tokens, w.tokens) << r.request_id << " " << how;
      ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << r.request_id;
      for (size_t i = 0; i < g.logprobs.size(); ++i) {
        EXPECT_NEAR(g.logprobs[i], w.logprobs[i], 1e-4f) << r.request_id << " token " << i;
      }
    }
    const scheduler::SchedulerStats st = spec_sched.stats();
    std::printf("%s: drafts %lld, %lld of %lld draft tokens accepted, %lld preemptions\n",
                how.c_str(), static_cast<long long>(st.num_spec_drafts_total),
                static_cast<long long>(st.num_spec_accepted_tokens_total),
                static_cast<long long>(st.num_spec_draft_tokens_total),
                static_cast<long long>(preemptions));
    EXPECT_GT(st.num_spec_accepted_tokens_total, 0) << "no draft was ever accepted";
    EXPECT_GT(st.num_spec_draft_tokens_total, st.num_spec_accepted_tokens_total)
        << "no draft was ever rejected";
    EXPECT_EQ(spec_sched.block_pool().num_free(), layout.num_blocks);
    EXPECT_EQ(spec_sched.stats().num_free_slots, layout.num_slots);  // lent ones count as free
  }
}

// KDA checkpoints saved inside a step (a 47-token prompt saving at 16 and 40 on its way)
// hold what steps ending there leave: the executor splits the sequence's KDA kernels at each
// save, the same arithmetic as three steps. A sequence without saves in the same batch is
// unaffected. (Through MLA layers a chunk's rows can differ from separate steps' in the last
// bits, so the comparison allows f32 rounding.)
TEST_P(BatchingTest, CheckpointsSavedInsideAStepEqualStepsEndingThere) {
  std::mt19937 rng(41);
  const std::vector<int32_t> prompt = RandomPrompt(rng, 47), other = RandomPrompt(rng, 13);
  const kvcache::CacheLayout layout = Layout(16, 8, 2, 2);
  auto sequence = [&](engine::SequenceId id, const std::vector<int32_t>& tokens, int64_t begin,
                      int64_t end, int32_t slot, int32_t first_block) {
    engine::ScheduledSequence s;
    s.seq_id = id;
    s.token_ids.assign(tokens.begin() + begin, tokens.begin() + end);
    s.num_computed_tokens = begin;
    for (int32_t b = 0; b * layout.block_size < end; ++b) s.block_table.push_back(first_block + b);
    s.slot = slot;
    s.slot_init = begin == 0 ? engine::SlotInit::kZero : engine::SlotInit::kCarry;
    return s;
  };
  engine::CpuExecutor one_step(*model_, layout), three_steps(*model_, layout);
  engine::StepPlan plan;
  plan.sequences.push_back(sequence(1, prompt, 0, 47, 0, 0));
  plan.sequences[0].save_checkpoints = {{0, 16}, {1, 40}};
  plan.sequences.push_back(sequence(2, other, 0, 13, 1, 8));
  one_step.Execute(plan);

  plan.sequences = {sequence(1, prompt, 0, 16, 0, 0), sequence(2, other, 0, 13, 1, 8)};
  plan.sequences[0].save_checkpoints = {{0, 16}};
  three_steps.Execute(plan);
  plan.sequences = {sequence(1, prompt, 16, 40, 0, 0)};
  plan.sequences[0].save_checkpoints = {{1, 24}};
  three_steps.Execute(plan);
  plan.sequences = {sequence(1, prompt, 40, 47, 0, 0)};
  three_steps.Execute(plan);

  const engine::CacheGeometry& g = model_->geometry();
  ASSERT_GT(g.num_kda_layers, 0);
  double worst = 0.0;
  for (const auto& [what, row] : {std::pair{"checkpoint at 16", layout.CheckpointRow(0)},
                                  std::pair{"checkpoint at 40", layout.CheckpointRow(1)},
                                  std::pair{"slot after 47", layout.SlotRow(0)},
                                  std::pair{"the other sequence", layout.SlotRow(1)}}) {
    for (int j = 0; j < g.num_kda_layers; ++j) {
      for (const auto& [got, want, n] :
           {std::tuple{one_step.StateRow(j, row), three_steps.StateRow(j, row), g.kda_state_floats},
            std::tuple{one_step.ConvRow(j, row), three_steps.ConvRow(j, row), g.kda_conv_floats}}) {
        double max_abs = 0.0, max_err = 0.0;
        for (int64_t i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(double{want[i]}));
        for (int64_t i = 0; i < n; ++i) {
          max_err = std::max(max_err, std::fabs(double{got[i]} - double{want[i]}));
        }
        ASSERT_GT(max_abs, 0.0) << what << ", KDA layer " << j << ": never written";
        EXPECT_LE(max_err, 1e-5 * max_abs) << what << ", KDA layer " << j;
        worst = std::max(worst, max_err / max_abs);
      }
    }
  }
  std::printf("largest difference: %.3g of the largest value\n", worst);
}

INSTANTIATE_TEST_SUITE_P(Families, BatchingTest, testing::Values("k3", "kimi-linear"),
                         [](const auto& info) {
                           return info.param == "k3" ? std::string("k3") : std::string("kl");
                         });

}  // namespace
}  // namespace strata
