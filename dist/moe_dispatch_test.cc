// The expert-parallel exchange against one rank holding every expert: N ranks (threads over the
// fake communicator), each with its own rows, must produce exactly what engine::MoeRunExperts
// produces on all rows with all experts local; the combine returns each partial sum to its
// origin once; a whole model split over two ranks gives the logits of one rank.
#include "dist/moe_dispatch.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dist/testing/fake_communicator.h"
#include "dist/testing/moe_test_util.h"
#include "engine/demo/checkpoint_generator.h"
#include "engine/model.h"

namespace strata::dist {
namespace {

using engine::ExpertWeights;
using engine::Workspace;
using testing::Concatenate;
using testing::F32Linear;
using testing::MakeInput;
using testing::MakeMoe;
using testing::RankInput;
using testing::Routing;
using testing::TinyMoe;

// Runs fn(rank) on one thread per rank and joins them.
void OnAllRanks(int world_size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

struct Case {
  std::string name;
  int world_size = 1;
  int num_experts = 8;
  int top_k = 2;
  std::vector<int64_t> rows;               // per rank
  std::vector<std::vector<int>> replicas;  // empty: EvenPlacement
  Routing routing = Routing::kRandom;
  bool latent = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  return {
      {"world1", 1, 8, 2, {7}},
      {"even_split_world2", 2, 8, 2, {5, 7}},
      {"seven_experts_on_two_ranks", 2, 7, 3, {6, 4}},
      {"world3_latent", 3, 8, 2, {4, 1, 6}, {}, Routing::kRandom, true},
      {"world4", 4, 8, 3, {3, 5, 2, 6}},
      {"one_expert_per_rank", 4, 4, 2, {3, 3, 3, 3}},
      {"more_ranks_than_experts", 4, 2, 1, {3, 2, 4, 1}},
      {"redundant_replicas", 3, 6, 2, {8, 9, 10}, {{0, 1, 2}, {0}, {1}, {1, 2}, {2, 0}, {2}}},
      {"empty_ranks", 3, 6, 2, {0, 5, 0}},
      {"all_ranks_empty", 2, 8, 2, {0, 0}},
      {"all_tokens_to_one_expert", 4, 8, 1, {4, 4, 4, 4}, {}, Routing::kAllToExpert0},
      {"topk_spans_all_ranks", 4, 8, 4, {5, 3, 4, 6}, {}, Routing::kOneExpertPerRankSlot},
      {"topk_spans_all_ranks_with_replicas",
       2,
       4,
       2,
       {6, 6},
       {{0, 1}, {0}, {1}, {1, 0}},
       Routing::kOneExpertPerRankSlot,
       true},
  };
}

ExpertPlacement PlacementOf(const Case& c) {
  if (c.replicas.empty()) return EvenPlacement(c.num_experts, c.world_size);
  auto p = PlacementFromReplicas(c.replicas, c.world_size);
  CHECK(p.ok()) << p.status();
  return *p;
}

class ExchangeTest : public ::testing::TestWithParam<Case> {};

TEST_P(ExchangeTest, EqualsAllExpertsOnOneRank) {
  const Case& c = GetParam();
  const TinyMoe moe = MakeMoe(c.num_experts, c.top_k, c.latent, 11);
  const ExpertPlacement placement = PlacementOf(c);
  std::vector<RankInput> inputs;
  for (int r = 0; r < c.world_size; ++r) {
    inputs.push_back(MakeInput(moe, c.rows[static_cast<size_t>(r)], c.routing, placement,
                               100 + static_cast<uint32_t>(r)));
  }

  // Reference: every row on one rank with every expert.
  const RankInput all = Concatenate(inputs);
  std::vector<float> expected(static_cast<size_t>(all.rows * moe.width));
  std::vector<int64_t> expected_tokens(static_cast<size_t>(c.num_experts), 0);
  Workspace ref_ws;
  engine::MoeRunExperts(moe.cfg, moe.w, all.z.data(), all.rows, all.ids.data(), all.weights.data(),
                        expected.data(), expected_tokens.data(), ref_ws);
  float scale = 1e-3f;
  for (float v : expected) scale = std::max(scale, std::fabs(v));

  testing::FakeGroup group(c.world_size);
  std::vector<std::vector<float>> routed(static_cast<size_t>(c.world_size));
  std::vector<std::vector<int64_t>> tokens(static_cast<size_t>(c.world_size));
  std::vector<ExpertExchangeStats> stats(static_cast<size_t>(c.world_size));
  std::vector<int64_t> warm_allocations(static_cast<size_t>(c.world_size));
  std::vector<int64_t> final_allocations(static_cast<size_t>(c.world_size));
  OnAllRanks(c.world_size, [&](int rank) {
    const RankInput& in = inputs[static_cast<size_t>(rank)];
    ExpertParallelExchange exchange(group.rank(rank), placement);
    Workspace ws;
    std::vector<float>& out = routed[static_cast<size_t>(rank)];
    std::vector<int64_t>& t = tokens[static_cast<size_t>(rank)];
    t.assign(static_cast<size_t>(c.num_experts), 0);
    // Three identical steps: the result must not depend on leftover state, and once warm
    // a step allocates nothing.
    for (int step = 0; step < 3; ++step) {
      out.assign(static_cast<size_t>(in.rows * moe.width), -7.0f);  // must be overwritten
      exchange.Exchange(moe.cfg, moe.w, /*moe_layer=*/step, in.z.data(), in.rows, in.ids.data(),
                        in.weights.data(), out.data(), step == 2 ? t.data() : nullptr, ws);
      if (step == 1) warm_allocations[static_cast<size_t>(rank)] = ws.num_block_allocations();
    }
    final_allocations[static_cast<size_t>(rank)] = ws.num_block_allocations();
    stats[static_cast<size_t>(rank)] = exchange.stats();
  });

  int64_t offset = 0;
  std::vector<int64_t> summed_tokens(static_cast<size_t>(c.num_experts), 0);
  int64_t total_dispatched = 0, total_received = 0;
  for (int r = 0; r < c.world_size; ++r) {
    const auto& out = routed[static_cast<size_t>(r)];
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], expected[static_cast<size_t>(offset) + i], 1e-5f * scale)
          << "rank " << r << " element " << i;
    }
    offset += static_cast<int64_t>(out.size());
    for (int e = 0; e < c.num_experts; ++e) {
      const int64_t n = tokens[static_cast<size_t>(r)][static_cast<size_t>(e)];
      EXPECT_TRUE(n == 0 || placement.Holds(r, e)) << "rank " << r << " ran expert " << e;
      summed_tokens[static_cast<size_t>(e)] += n;
    }
    const ExpertExchangeStats& s = stats[static_cast<size_t>(r)];
    EXPECT_EQ(s.num_exchanges, 3);
    EXPECT_EQ(s.expert_tokens.size(), static_cast<size_t>(c.num_experts));
    for (int e = 0; e < c.num_experts; ++e) {
      EXPECT_EQ(s.expert_tokens[static_cast<size_t>(e)],
                3 * tokens[static_cast<size_t>(r)][static_cast<size_t>(e)]);
    }
    total_dispatched += s.rows_dispatched;
    total_received += s.rows_received;
    if (c.world_size == 1) {
      EXPECT_EQ(s.bytes_sent, 0);
      EXPECT_EQ(s.bytes_received, 0);
    }
    EXPECT_EQ(final_allocations[static_cast<size_t>(r)], warm_allocations[static_cast<size_t>(r)])
        << "a warm step allocated workspace blocks on rank " << r;
  }
  EXPECT_EQ(summed_tokens, expected_tokens) << "every (row, slot) ran exactly once";
  EXPECT_EQ(total_dispatched, total_received);
}

INSTANTIATE_TEST_SUITE_P(Placements, ExchangeTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// Combine accounting with "identity experts": z[:, 0] = 1 and every expert reads only that
// column, so expert e outputs the constant h = SiLU(1)·1 in column 1 + e and zeros elsewhere.
// Then routed[row, 1 + e] = h · Σ_{slots j with id e} weight_j exactly when every (row, slot)
// came back to its origin row once; the weights encode (rank, row, slot), so a partial sum that
// went to the wrong row, twice, or nowhere shows up.
TEST(ExchangeCombineTest, EveryTokenReturnsToItsOriginOnceWithItsWeight) {
  constexpr int kWorld = 3, kExperts = 6, kTopK = 3;
  TinyMoe moe;
  moe.cfg.hidden_size = kExperts + 1;
  moe.cfg.moe.num_experts = kExperts;
  moe.cfg.moe.num_experts_per_token = kTopK;
  moe.cfg.moe.moe_intermediate_size = 1;
  moe.width = kExperts + 1;
  for (int e = 0; e < kExperts; ++e) {
    ExpertWeights ew;
    auto column0 = [](int64_t, int64_t i) { return i == 0 ? 1.0f : 0.0f; };
    ew.w1 = F32Linear(1, moe.width, column0);
    ew.w3 = F32Linear(1, moe.width, column0);
    ew.w2 = F32Linear(moe.width, 1, [e](int64_t o, int64_t) { return o == 1 + e ? 1.0f : 0.0f; });
    moe.w.experts.push_back(std::move(ew));
  }
  const double h = 1.0 / (1.0 + std::exp(-1.0));  // SiLU(1) · 1
  auto placement = PlacementFromReplicas({{0, 1, 2}, {0}, {1, 2}, {1}, {2}, {2, 0}}, kWorld);
  ASSERT_TRUE(placement.ok());
  const std::vector<int64_t> rows = {7, 0, 11};

  testing::FakeGroup group(kWorld);
  std::vector<RankInput> inputs(kWorld);
  std::vector<std::vector<float>> routed(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    inputs[r] = MakeInput(moe, rows[r], Routing::kRandom, *placement, 7 + r);
    for (int64_t i = 0; i < rows[r]; ++i) {
      inputs[r].z[static_cast<size_t>(i * moe.width)] = 1.0f;
      for (int j = 0; j < kTopK; ++j) {
        inputs[r].weights[static_cast<size_t>(i * kTopK + j)] =
            static_cast<float>(1 + r + 0.125 * static_cast<double>(i) + 0.0078125 * j);
      }
    }
  }
  OnAllRanks(kWorld, [&](int rank) {
    ExpertParallelExchange exchange(group.rank(rank), *placement);
    Workspace ws;
    const RankInput& in = inputs[rank];
    routed[rank].assign(static_cast<size_t>(in.rows * moe.width), 0.0f);
    exchange.Exchange(moe.cfg, moe.w, 0, in.z.data(), in.rows, in.ids.data(), in.weights.data(),
                      routed[rank].data(), nullptr, ws);
  });
  for (int r = 0; r < kWorld; ++r) {
    for (int64_t i = 0; i < rows[r]; ++i) {
      std::vector<double> expected(static_cast<size_t>(moe.width), 0.0);
      for (int j = 0; j < kTopK; ++j) {
        const int32_t e = inputs[r].ids[static_cast<size_t>(i * kTopK + j)];
        expected[static_cast<size_t>(1 + e)] +=
            h * inputs[r].weights[static_cast<size_t>(i * kTopK + j)];
      }
      for (int64_t col = 0; col < moe.width; ++col) {
        EXPECT_NEAR(routed[r][static_cast<size_t>(i * moe.width + col)],
                    expected[static_cast<size_t>(col)], 1e-6)
            << "rank " << r << " row " << i << " column " << col;
      }
    }
  }
}

// A communicator that fails every call, as a real one does after a peer died.
class DeadPeerCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::string backend() const override { return "test"; }
  absl::Status AllToAllV(const void*, const int64_t*, void*, const int64_t*) override {
    return Error();
  }
  absl::Status AllToAll(const void*, void*, int64_t) override { return Error(); }
  absl::Status AllReduce(int64_t*, int64_t, ReduceOp) override { return Error(); }
  absl::Status AllReduce(float*, int64_t, ReduceOp) override { return Error(); }
  absl::Status AllGather(const void*, int64_t, void*) override { return Error(); }
  absl::Status Broadcast(void*, int64_t, int) override { return Error(); }
  absl::Status Barrier() override { return Error(); }

 private:
  static absl::Status Error() {
    return absl::DeadlineExceededError("all-to-all (collective #3): rank 1 did not answer");
  }
};

TEST(ExchangeFailureDeathTest, CommunicatorErrorEndsTheProcessNamingCollectiveAndRank) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const TinyMoe moe = MakeMoe(4, 2, false, 3);
  const ExpertPlacement placement = EvenPlacement(4, 2);
  const RankInput in = MakeInput(moe, 3, Routing::kRandom, placement, 5);
  DeadPeerCommunicator comm;
  EXPECT_EXIT(
      {
        ExpertParallelExchange exchange(&comm, placement);
        Workspace ws;
        std::vector<float> out(static_cast<size_t>(in.rows * moe.width));
        exchange.Exchange(moe.cfg, moe.w, 5, in.z.data(), in.rows, in.ids.data(), in.weights.data(),
                          out.data(), nullptr, ws);
      },
      ::testing::ExitedWithCode(kExpertExchangeFailureExitCode),
      "expert exchange: all-to-all \\(dispatch row counts\\) of MoE layer 5 failed on rank 0 of 2 "
      "\\(test\\): .*rank 1 did not answer");
}

// ---- whole model: two ranks splitting a batch == one rank on the whole batch -------------------

struct ModelVariant {
  std::string name;
  engine::demo::GeneratorOptions options;
};

void PrintTo(const ModelVariant& v, std::ostream* os) { *os << v.name; }

class ExpertParallelModelTest : public ::testing::TestWithParam<ModelVariant> {
 protected:
  void SetUp() override {
    // Per process and test: ctest runs this binary's tests in parallel.
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(test.begin(), test.end(), '/', '_');
    dir_ = ::testing::TempDir() + "/ep_model_test_" + GetParam().name + "_" +
           std::to_string(::getpid()) + "_" + test;
    auto generated = engine::demo::GenerateCheckpoint(GetParam().options, dir_);
    ASSERT_TRUE(generated.ok()) << generated.status();
    auto model = engine::Model::Load(dir_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<int32_t> Prompt(int n, int salt) const {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) {
      ids.push_back(static_cast<int32_t>((i * 37 + salt * 11 + 5) % model_->config().vocab_size));
    }
    return ids;
  }

  std::string dir_;
  std::unique_ptr<engine::Model> model_;
};

// Sequences and their owner rank; one step of prefill then greedy decode steps in lockstep
// (rank 1's only sequence stops early, so it then runs empty steps).
TEST_P(ExpertParallelModelTest, TwoRanksSplittingABatchEqualOneRankOnTheWholeBatch) {
  using engine::ForwardSequence;
  using engine::LogitsMode;
  using engine::SequenceCache;
  const int64_t vocab = model_->config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {Prompt(9, 1), Prompt(5, 2), Prompt(1, 3)};
  const std::vector<int> owner = {0, 1, 0};
  const std::vector<int> decode_steps = {4, 1, 4};
  constexpr int kSteps = 5;  // step 0: prefill; steps 1..4: decode
  const int kSeqs = static_cast<int>(prompts.size());

  // One forward step over the given sequences (those still running), returning each one's
  // last-row logits; `tokens[s]` grows by the greedy token.
  struct SeqState {
    std::unique_ptr<SequenceCache> cache;
    std::vector<int32_t> tokens;
    int64_t computed = 0;
  };
  auto step = [&](std::vector<SeqState*> seqs, const engine::ForwardContext& ctx,
                  std::vector<std::vector<float>>* last_logits) {
    std::vector<ForwardSequence> batch;
    for (SeqState* s : seqs) {
      const int64_t n = static_cast<int64_t>(s->tokens.size()) - s->computed;
      batch.push_back(
          {s->tokens.data() + s->computed, n, s->computed, s->cache->view(), LogitsMode::kLast});
    }
    std::vector<float> logits;
    model_->Forward(batch, &logits, ctx);
    ASSERT_EQ(logits.size(), seqs.size() * static_cast<size_t>(vocab));
    last_logits->clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      const float* row = logits.data() + i * static_cast<size_t>(vocab);
      last_logits->emplace_back(row, row + vocab);
      seqs[i]->computed = static_cast<int64_t>(seqs[i]->tokens.size());
      seqs[i]->tokens.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
    }
  };
  auto make_states = [&] {
    std::vector<SeqState> states(static_cast<size_t>(kSeqs));
    for (int s = 0; s < kSeqs; ++s) {
      states[s].cache = std::make_unique<SequenceCache>(model_->geometry(), 16);
      states[s].tokens = prompts[static_cast<size_t>(s)];
    }
    return states;
  };
  auto running = [&](std::vector<SeqState>& states, int t, int rank) {
    std::vector<SeqState*> out;
    for (int s = 0; s < kSeqs; ++s) {
      if ((rank < 0 || owner[s] == rank) && t <= decode_steps[s]) out.push_back(&states[s]);
    }
    return out;
  };

  // Reference: one rank, all experts, the whole batch.
  std::vector<SeqState> ref_states = make_states();
  std::vector<std::vector<std::vector<float>>> ref_logits(kSteps);  // [step][seq in batch]
  std::vector<std::vector<int>> ref_order(kSteps);
  for (int t = 0; t < kSteps; ++t) {
    step(running(ref_states, t, -1), engine::ForwardContext{}, &ref_logits[t]);
    for (int s = 0; s < kSeqs; ++s) {
      if (t <= decode_steps[s]) ref_order[t].push_back(s);
    }
  }

  // Two ranks, experts split evenly, each running its own sequences.
  constexpr int kWorld = 2;
  testing::FakeGroup group(kWorld);
  const ExpertPlacement placement = EvenPlacement(model_->config().moe.num_experts, kWorld);
  std::vector<SeqState> states = make_states();
  std::vector<std::vector<std::vector<float>>> logits(kSteps,
                                                      std::vector<std::vector<float>>(kSeqs));
  std::vector<std::vector<int64_t>> expert_tokens(kWorld);
  OnAllRanks(kWorld, [&](int rank) {
    ExpertParallelExchange exchange(group.rank(rank), placement);
    Workspace ws;
    engine::ForwardContext ctx;
    ctx.exchange = &exchange;
    ctx.workspace = &ws;
    ctx.expert_tokens = &expert_tokens[static_cast<size_t>(rank)];
    for (int t = 0; t < kSteps; ++t) {
      std::vector<SeqState*> mine = running(states, t, rank);
      std::vector<std::vector<float>> out;
      step(mine, ctx, &out);
      for (size_t i = 0; i < mine.size(); ++i) {
        const int s = static_cast<int>(mine[i] - states.data());
        logits[static_cast<size_t>(t)][static_cast<size_t>(s)] = out[i];
      }
    }
  });

  for (int t = 0; t < kSteps; ++t) {
    for (size_t i = 0; i < ref_order[t].size(); ++i) {
      const int s = ref_order[t][i];
      const auto& got = logits[static_cast<size_t>(t)][static_cast<size_t>(s)];
      const auto& want = ref_logits[static_cast<size_t>(t)][i];
      ASSERT_EQ(got.size(), want.size()) << "step " << t << " sequence " << s;
      float worst = 0;
      for (size_t v = 0; v < got.size(); ++v) worst = std::max(worst, std::fabs(got[v] - want[v]));
      EXPECT_LT(worst, 1e-4f) << "step " << t << " sequence " << s;
    }
  }
  for (int s = 0; s < kSeqs; ++s) {
    EXPECT_EQ(states[s].tokens, ref_states[s].tokens) << "greedy tokens of sequence " << s;
  }
  // Each rank ran only its own experts.
  for (int r = 0; r < kWorld; ++r) {
    int64_t total = 0;
    for (size_t e = 0; e < expert_tokens[static_cast<size_t>(r)].size(); ++e) {
      const int64_t n = expert_tokens[static_cast<size_t>(r)][e];
      EXPECT_TRUE(n == 0 || placement.Holds(r, static_cast<int>(e)))
          << "rank " << r << " expert " << e;
      total += n;
    }
    EXPECT_GT(total, 0) << "rank " << r << " ran no expert";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, ExpertParallelModelTest,
    ::testing::Values(ModelVariant{"k3", {.family = "k3", .preset = "tiny", .seed = 21}},
                      ModelVariant{"kimi_linear",
                                   {.family = "kimi-linear", .preset = "tiny", .seed = 22}}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace strata::dist
