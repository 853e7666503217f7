// Tensor parallelism end to end on the CPU: a model loaded as T shards, run by T threads over an
// in-process communicator, gives the single-rank logits (within fp32 rounding: the partial sums
// are added in another order) and the same greedy tokens, on K3- and Kimi-Linear-shaped tiny
// checkpoints — also with decode context parallelism (each rank holding every C-th position's
// latent row). Real threads over Gloo: tests/tools/tensor_parallel_cli_test.sh; processes:
// tests/multirank (case tp).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/expert_placement.h"
#include "dist/moe_dispatch.h"
#include "dist/tensor_parallel_group.h"
#include "dist/testing/fake_communicator.h"
#include "engine/demo/checkpoint_generator.h"
#include "engine/executor.h"
#include "engine/generator.h"
#include "engine/model.h"
#include "engine/moe.h"
#include "engine/workspace.h"
#include "kvcache/memory_planner.h"

namespace strata::dist {
namespace {

struct TpCase {
  std::string name;
  std::string family;
  std::map<std::string, std::string> overrides;
};

void PrintTo(const TpCase& c, std::ostream* os) { *os << c.name; }

std::vector<int32_t> PromptIds(int64_t vocab, int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  return ids;
}

class TensorParallelTest : public ::testing::TestWithParam<TpCase> {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/tp_" + GetParam().name;
    engine::demo::GeneratorOptions options;
    options.family = GetParam().family;
    options.seed = 5;
    options.overrides = GetParam().overrides;
    ASSERT_TRUE(engine::demo::GenerateCheckpoint(options, dir_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `body(model, group)` on every rank of a `size`-rank group (threads), each with its own
  // shard; returns what each rank's body returned.
  // With 1 < context_parallel < size each context-parallel group of that many consecutive ranks
  // has its own communicator (TensorParallelGroup::context_parallel); the all-to-alls each rank's
  // tensor-parallel and context-parallel groups ran are left in tp_all_to_alls_ /
  // cp_all_to_alls_.
  template <typename Result, typename Body>
  std::vector<Result> OnEveryRank(int size, Body body, int context_parallel = 1) {
    testing::FakeGroup group(size);
    const bool cp_groups = context_parallel > 1 && context_parallel < size;
    std::vector<std::unique_ptr<testing::FakeGroup>> cp_comms;
    for (int g = 0; cp_groups && g < size / context_parallel; ++g) {
      cp_comms.push_back(std::make_unique<testing::FakeGroup>(context_parallel));
    }
    std::vector<Result> results(static_cast<size_t>(size));
    tp_all_to_alls_.assign(static_cast<size_t>(size), 0);
    cp_all_to_alls_.assign(static_cast<size_t>(size), 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        engine::ModelLoadOptions load;
        load.tensor_parallel = {r, size};
        load.decode_context_parallel_size = context_parallel;
        auto model = engine::Model::Load(dir_, load);
        ASSERT_TRUE(model.ok()) << model.status();
        CommunicatorTensorParallelGroup tp(group.rank(r));
        std::unique_ptr<CommunicatorTensorParallelGroup> cp;
        if (cp_groups) {
          cp = std::make_unique<CommunicatorTensorParallelGroup>(
              cp_comms[static_cast<size_t>(r / context_parallel)]->rank(r % context_parallel));
          tp.set_context_parallel(cp.get());
        }
        results[static_cast<size_t>(r)] = body(**model, &tp);
        tp_all_to_alls_[static_cast<size_t>(r)] = tp.stats().all_to_alls;
        if (cp != nullptr) cp_all_to_alls_[static_cast<size_t>(r)] = cp->stats().all_to_alls;
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

  std::vector<int64_t> tp_all_to_alls_, cp_all_to_alls_;

  std::string dir_;
};

TEST_P(TensorParallelTest, LogitsEqualOneRank) {
  auto full = engine::Model::Load(dir_);
  ASSERT_TRUE(full.ok()) << full.status();
  const int64_t vocab = (*full)->config().vocab_size;
  const std::vector<int32_t> ids = PromptIds(vocab, 37);
  auto expected = engine::PromptLogits(**full, ids, 16);
  ASSERT_TRUE(expected.ok());
  float scale = 0;
  for (float v : *expected) scale = std::max(scale, std::fabs(v));
  // (tensor-parallel size, decode-context-parallel size)
  // (4, 2): two context-parallel groups of 2 ranks, each holding every position once.
  for (auto [size, cp] : {std::pair{2, 1}, {4, 1}, {2, 2}, {4, 4}, {4, 2}}) {
    SCOPED_TRACE(absl::StrCat("tensor-parallel size ", size, ", context-parallel size ", cp));
    const auto logits = OnEveryRank<std::vector<float>>(
        size,
        [&](const engine::Model& model, engine::TensorParallelGroup* tp) {
          EXPECT_EQ(model.config().vocab_size, vocab);
          auto l = engine::PromptLogits(model, ids, 16, LatentDType::kF32, tp);
          EXPECT_TRUE(l.ok());
          return l.ok() ? *l : std::vector<float>();
        },
        cp);
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(logits[static_cast<size_t>(r)].size(), expected->size()) << "rank " << r;
      // Every rank of the group holds the same gathered logits, bit for bit.
      EXPECT_EQ(logits[static_cast<size_t>(r)], logits[0]) << "rank " << r;
      // The partials' all-to-all of every MLA layer: over the C ranks of the context-parallel
      // group when C < T, over the tensor-parallel group when C = T, none without.
      const bool has_mla = (*full)->config().num_layers > (*full)->config().NumKdaLayers();
      if (cp > 1 && cp < size) {
        EXPECT_EQ(tp_all_to_alls_[static_cast<size_t>(r)], 0) << "rank " << r;
        EXPECT_EQ(cp_all_to_alls_[static_cast<size_t>(r)] > 0, has_mla) << "rank " << r;
      } else {
        EXPECT_EQ(tp_all_to_alls_[static_cast<size_t>(r)] > 0, cp > 1 && has_mla) << "rank " << r;
      }
    }
    int64_t worst = 0;
    float worst_diff = 0;
    for (size_t i = 0; i < expected->size(); ++i) {
      const float diff = std::fabs(logits[0][i] - (*expected)[i]);
      if (diff > worst_diff) worst_diff = diff, worst = static_cast<int64_t>(i);
    }
    // fp32 rounding of sums taken in another order, relative to the logits' scale.
    EXPECT_LE(worst_diff, 2e-5f * std::max(1.0f, scale))
        << "position " << worst / vocab << " token " << worst % vocab << ": "
        << logits[0][static_cast<size_t>(worst)] << " vs "
        << (*expected)[static_cast<size_t>(worst)];
  }
}

TEST_P(TensorParallelTest, GreedyTokensEqualOneRank) {
  auto full = engine::Model::Load(dir_);
  ASSERT_TRUE(full.ok()) << full.status();
  engine::GenerateOptions options;
  options.max_tokens = 12;
  options.ignore_eos = true;
  options.sampling.temperature = 0;
  options.prefill_chunk_tokens = 7;
  const std::vector<int32_t> prompt = PromptIds((*full)->config().vocab_size, 20);
  auto expected = engine::Generate(**full, prompt, options);
  ASSERT_TRUE(expected.ok());
  for (auto [size, cp] : {std::pair{2, 1}, {2, 2}, {4, 2}}) {
    const auto tokens = OnEveryRank<std::vector<int32_t>>(
        size,
        [&](const engine::Model& model, engine::TensorParallelGroup* tp) {
          engine::GenerateOptions o = options;
          o.tensor_parallel = tp;
          auto t = engine::Generate(model, prompt, o);
          EXPECT_TRUE(t.ok());
          return t.ok() ? *t : std::vector<int32_t>();
        },
        cp);
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(tokens[static_cast<size_t>(r)], *expected)
          << "tensor-parallel size " << size << ", context-parallel size " << cp << ", rank " << r;
    }
  }
}

// Data parallelism over tensor-parallel groups, one MoE block: two groups of 2 ranks with
// different rows (5 and 1: rank 1 of group 1 sends none), the routed experts spread over all 4
// ranks. Each rank sends its share of its group's rows through the exchange; after the group's
// all-reduce (Model::Forward's, after every FFN block) every rank holds the block's output on
// one rank holding everything.
TEST_P(TensorParallelTest, MoeBlockOverDataParallelGroupsEqualsOneRank) {
  auto full = engine::Model::Load(dir_);
  ASSERT_TRUE(full.ok()) << full.status();
  const engine::ModelConfig& cfg = (*full)->config();
  int layer = 0;
  while ((*full)->weights().layers[static_cast<size_t>(layer)].moe == nullptr) ++layer;
  const int64_t d = cfg.hidden_size;
  const std::vector<int64_t> rows = {5, 1};
  std::vector<std::vector<float>> x(2), expected(2);
  float scale = 0;
  for (size_t g = 0; g < 2; ++g) {
    for (int64_t i = 0; i < rows[g] * d; ++i) {
      x[g].push_back(std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(g)));
    }
    expected[g].resize(static_cast<size_t>(rows[g] * d));
    engine::Workspace ws;
    engine::MoeForward(cfg, *(*full)->weights().layers[static_cast<size_t>(layer)].moe, 0,
                       x[g].data(), rows[g], expected[g].data(), nullptr, nullptr, ws);
    for (float v : expected[g]) scale = std::max(scale, std::fabs(v));
  }
  const ExpertPlacement placement = EvenPlacement(cfg.moe.num_experts, 4);
  testing::FakeGroup world(4), group0(2), group1(2);
  std::vector<std::vector<float>> got(4);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      const size_t g = static_cast<size_t>(w / 2);
      engine::ModelLoadOptions load;
      load.tensor_parallel = {w % 2, 2};
      auto shard = engine::Model::Load(dir_, load);
      ASSERT_TRUE(shard.ok()) << shard.status();
      ExpertParallelExchange exchange(world.rank(w), placement);
      CommunicatorTensorParallelGroup tp((g == 0 ? group0 : group1).rank(w % 2));
      const engine::MoeTensorParallel moe_tp{&tp, &(*shard)->tensor_parallel_experts()};
      std::vector<float>& out = got[static_cast<size_t>(w)];
      out.resize(static_cast<size_t>(rows[g] * d));
      engine::Workspace ws;
      engine::MoeForward((*shard)->config(),
                         *(*shard)->weights().layers[static_cast<size_t>(layer)].moe, 0,
                         x[g].data(), rows[g], out.data(), nullptr, &exchange, ws, &moe_tp);
      tp.AllReduceSum(out.data(), rows[g] * d);
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < 4; ++w) {
    const std::vector<float>& want = expected[static_cast<size_t>(w / 2)];
    ASSERT_EQ(got[static_cast<size_t>(w)].size(), want.size()) << "rank " << w;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[static_cast<size_t>(w)][i], want[i], 2e-5f * std::max(1.0f, scale))
          << "rank " << w << ", row " << i / static_cast<size_t>(d);
    }
  }
}

TEST_P(TensorParallelTest, ShardHoldsItsPart) {
  auto full = engine::Model::Load(dir_);
  ASSERT_TRUE(full.ok());
  engine::ModelLoadOptions load;
  load.tensor_parallel = {1, 2};
  auto shard = engine::Model::Load(dir_, load);
  ASSERT_TRUE(shard.ok()) << shard.status();
  const engine::ModelConfig& cfg = (*full)->config();
  EXPECT_EQ((*shard)->config().kda.num_heads, cfg.kda.num_heads / 2);
  EXPECT_EQ((*shard)->config().mla.num_heads, cfg.mla.num_heads / 2);
  EXPECT_EQ((*shard)->checkpoint_config().mla.num_heads, cfg.mla.num_heads);
  // Each rank keeps the recurrent state of its own heads only; the latent row is whole.
  EXPECT_EQ((*shard)->geometry().kda_state_floats * 2, (*full)->geometry().kda_state_floats);
  EXPECT_EQ((*shard)->geometry().latent_dim, (*full)->geometry().latent_dim);
  // Vocabulary rows: the second half.
  EXPECT_EQ((*shard)->weights().embed.out_features, cfg.vocab_size - (cfg.vocab_size + 1) / 2);
  EXPECT_LT((*shard)->weight_stats().total_bytes, (*full)->weight_stats().total_bytes * 3 / 4);
}

// The engine's steps under tensor parallelism: the lead executes plans (sampling), the follower
// runs the same plans on its shard and keeps in its KDA caches only the drafts the lead
// accepted. Step 1 verifies three drafts (two right, one wrong); step 2's token then reads the
// caches both ranks kept: its log-probability equals one rank's only if the follower's did too.
struct StepOutcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

StepOutcome RunDraftSteps(const engine::Model& model, engine::TensorParallelGroup* tp,
                          const std::vector<int32_t>& prompt,
                          const std::vector<int32_t>& continuation) {
  constexpr int kBlockSize = 16, kBlocks = 4;
  engine::CpuExecutor executor(model, kvcache::LayoutWithPools(engine::CacheSpecFor(model.config()),
                                                               kBlockSize, kBlocks, 1, 0));
  if (tp != nullptr) {
    engine::ForwardContext context;
    context.tensor_parallel = tp;
    executor.set_forward_context(context);
  }
  StepOutcome outcome;
  if (tp != nullptr && tp->rank() != 0) {
    for (int step = 0; step < 3; ++step) executor.FollowStep();
    return outcome;
  }
  engine::StepPlan plan;
  engine::ScheduledSequence seq;
  seq.token_ids = prompt;
  for (int b = 0; b < kBlocks; ++b) seq.block_table.push_back(b);
  seq.slot = model.geometry().num_kda_layers > 0 ? 0 : -1;
  seq.slot_init = engine::SlotInit::kZero;
  seq.sample = true;
  seq.num_logprobs = 0;
  engine::SamplingParams greedy;
  greedy.temperature = 0.0f;
  seq.sampler = std::make_shared<engine::Sampler>(greedy, 1, seq.token_ids);
  plan.sequences.push_back(seq);
  engine::StepResult result;
  auto record = [&] {
    for (const engine::SampledToken& t : result.sampled) {
      outcome.tokens.push_back(t.token_id);
      outcome.logprobs.push_back(t.logprob);
    }
  };
  executor.ExecuteInto(plan, &result);  // prefill: samples continuation[0]
  record();
  engine::ScheduledSequence& s = plan.sequences[0];
  s.num_computed_tokens = static_cast<int64_t>(prompt.size());
  s.slot_init = engine::SlotInit::kCarry;
  // continuation[0] plus drafts continuation[1], continuation[2] and a wrong third.
  const int32_t wrong = (continuation[3] + 1) % model.config().vocab_size;
  s.token_ids = {continuation[0], continuation[1], continuation[2], wrong};
  s.num_draft_tokens = 3;
  plan.step_id = 1;
  executor.ExecuteInto(plan, &result);  // continuation[1..3]: two drafts accepted
  record();
  s.num_computed_tokens += 3;
  s.token_ids = {continuation[3]};
  s.num_draft_tokens = 0;
  plan.step_id = 2;
  executor.ExecuteInto(plan, &result);  // continuation[4], from the caches the drafts left
  record();
  return outcome;
}

TEST_P(TensorParallelTest, DraftVerificationStepsEqualOneRank) {
  auto full = engine::Model::Load(dir_);
  ASSERT_TRUE(full.ok()) << full.status();
  const std::vector<int32_t> prompt = PromptIds((*full)->config().vocab_size, 21);
  engine::GenerateOptions options;
  options.max_tokens = 6;
  options.ignore_eos = true;
  options.sampling.temperature = 0;
  auto continuation = engine::Generate(**full, prompt, options);
  ASSERT_TRUE(continuation.ok());
  const StepOutcome expected = RunDraftSteps(**full, nullptr, prompt, *continuation);
  ASSERT_EQ(expected.tokens,
            std::vector<int32_t>(continuation->begin(), continuation->begin() + 5));
  for (int cp : {1, 2}) {
    const auto outcomes = OnEveryRank<StepOutcome>(
        2,
        [&](const engine::Model& model, engine::TensorParallelGroup* tp) {
          return RunDraftSteps(model, tp, prompt, *continuation);
        },
        cp);
    EXPECT_EQ(outcomes[0].tokens, expected.tokens) << "context-parallel size " << cp;
    ASSERT_EQ(outcomes[0].logprobs.size(), expected.logprobs.size());
    for (size_t i = 0; i < expected.logprobs.size(); ++i) {
      EXPECT_NEAR(outcomes[0].logprobs[i], expected.logprobs[i], 1e-4)
          << "token " << i << ", context-parallel size " << cp;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TensorParallelTest,
    ::testing::Values(
        // K3: AttnRes, q-LoRA, gated MLA, full-rank KDA gate, LatentMoE with latent_norm,
        // shared experts; vocabulary not a multiple of 4 (uneven shares).
        TpCase{"k3", "k3", {{"mla_heads", "4"}, {"kda_heads", "4"}, {"vocab", "509"}}},
        // K3 without q-LoRA, tied embeddings, grouped routing.
        TpCase{"k3_tied_no_qlora",
               "k3",
               {{"mla_heads", "4"},
                {"kda_heads", "4"},
                {"q_lora", "0"},
                {"tie_embeddings", "true"},
                {"groups", "2"},
                {"topk_group", "1"}}},
        // Kimi-Linear: plain residuals, low-rank KDA gate, full-width experts, a dense first
        // layer, one shared expert.
        TpCase{"kimi_linear",
               "kimi-linear",
               {{"mla_heads", "4"}, {"kda_heads", "4"}, {"first_dense", "1"}}}),
    [](const auto& info) { return info.param.name; });

TEST(TensorParallelRefusal, ContextParallelMustDivideTheGroup) {
  const std::string dir = ::testing::TempDir() + "/tp_refusal_cp";
  engine::demo::GeneratorOptions options;
  options.family = "k3";
  options.overrides = {{"mla_heads", "4"}, {"kda_heads", "4"}};
  ASSERT_TRUE(engine::demo::GenerateCheckpoint(options, dir).ok());
  engine::ModelLoadOptions load;
  load.tensor_parallel = {0, 4};
  load.decode_context_parallel_size = 3;
  auto model = engine::Model::Load(dir, load);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(),
            "--decode-context-parallel-size 3 must divide --tensor-parallel-size 4 (a "
            "context-parallel group is made of ranks of one tensor-parallel group)");
  std::filesystem::remove_all(dir);
}

TEST(TensorParallelRefusal, HeadsNotDivisible) {
  const std::string dir = ::testing::TempDir() + "/tp_refusal";
  engine::demo::GeneratorOptions options;
  options.family = "k3";
  options.overrides = {{"mla_heads", "3"}, {"kda_heads", "4"}};
  ASSERT_TRUE(engine::demo::GenerateCheckpoint(options, dir).ok());
  engine::ModelLoadOptions load;
  load.tensor_parallel = {0, 2};
  auto model = engine::Model::Load(dir, load);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(),
            "3 MLA heads cannot be split over --tensor-parallel-size 2 (it must divide them)");
  options.overrides = {{"mla_heads", "4"}, {"kda_heads", "3"}};
  ASSERT_TRUE(engine::demo::GenerateCheckpoint(options, dir).ok());
  model = engine::Model::Load(dir, load);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(),
            "3 KDA heads cannot be split over --tensor-parallel-size 2 (it must divide them)");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::dist
