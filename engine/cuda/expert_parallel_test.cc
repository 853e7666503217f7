// CUDA expert parallelism (device_moe_dispatch.h) against one executor holding every expert.
// The ranks are threads of one process joined by the in-process communicator
// (dist/testing/fake_communicator.h) moving device buffers with cudaMemcpy, so one GPU (or the
// CPU emulator) serves every rank; between GPUs and nodes the same exchange runs over NCCL, whose
// own test is dist_nccl_communicator_test. Each rank runs
// its own sequences and holds only its experts; every sequence must get the distribution the single
// executor gives it, step by step (teacher forcing with the single executor's greedy tokens). The
// exchange sums a row's destinations in slot order, which is the single-rank combine's order, so
// the distributions agree to f32 rounding (tolerance 1e-5; measured: bit-identical on the
// emulator).
//
// Covered: K3 (LatentMoE, shared experts, AttnRes) and Kimi-Linear (experts on the hidden
// width); 2 ranks with the even placement and 3 ranks with an uneven one plus replicas of a hot
// expert; prefill crossing a page, decode steps, a step where one rank has no sequence (it still
// runs every layer's exchange and its experts serve the others), a rank holding no expert.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/check.h"
#include "dist/expert_placement.h"
#include "dist/testing/fake_communicator.h"
#include "engine/cuda/cuda_executor.h"
#include "engine/cuda/device_moe_dispatch.h"
#include "engine/cuda/testing/rank_threads.h"
#include "engine/demo/checkpoint_generator.h"
#include "engine/model.h"
#include "kernels/cuda/testing.h"
#include "kvcache/memory_planner.h"

namespace strata::engine::cuda {
namespace {

constexpr int kBlockSize = 64;
constexpr int kNumBlocks = 16;
constexpr int kNumSlots = 6;
constexpr double kProbabilityTolerance = 1e-5;

struct Case {
  std::string name, family;
  int world_size = 2;
  // Replica ranks per expert (empty: EvenPlacement).
  std::vector<std::vector<int>> replicas;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// A sequence of the test: which rank runs it, its prompt, and the steps it sits out.
struct TestSequence {
  int rank = 0;
  std::vector<int32_t> prompt;
  int idle_step = -1;  // a decode step it skips (its rank may then have no work)
  int64_t computed = 0;
  int32_t next = 0;
};

class ExpertParallelTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!kernels::cuda::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
    dir_ = testing::TempDir() + "/cuda_ep_" + GetParam().name + "_" + std::to_string(getpid());
    engine::demo::GeneratorOptions options;
    options.family = GetParam().family;
    options.preset = "tiny";
    options.seed = 11;
    options.overrides = engine::demo::CudaShapeOverrides();
    options.overrides.insert({{"layers", "3"}, {"vocab", "997"}, {"topk", "3"}});
    ASSERT_TRUE(engine::demo::GenerateCheckpoint(options, dir_).ok());
    auto model = Model::Load(dir_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  kvcache::CacheLayout Layout() const {
    return kvcache::LayoutWithPools(CudaCacheSpecFor(model_->config()), kBlockSize, kNumBlocks,
                                    kNumSlots, 0);
  }

  std::unique_ptr<CudaExecutor> MakeExecutor(int device, DeviceExpertExchange* exchange) {
    CudaExecutorOptions options;
    options.device = device;
    options.model.expert_exchange = exchange;
    auto created = CudaExecutor::Create(*model_, options);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return nullptr;
    EXPECT_TRUE((*created)->AllocateCaches(Layout()).ok());
    return std::move(*created);
  }

  // The step's entry for sequence i (its own block and slot), or nothing when it sits out.
  ScheduledSequence Entry(int i, const TestSequence& s, int step) const {
    ScheduledSequence e;
    e.seq_id = i + 1;
    e.token_ids = step == 0 ? s.prompt : std::vector<int32_t>{s.next};
    e.num_computed_tokens = s.computed;
    e.block_table = {2 * i, 2 * i + 1};
    e.slot = model_->config().NumKdaLayers() > 0 ? i : -1;
    e.slot_init = step == 0 ? SlotInit::kZero : SlotInit::kCarry;
    e.sample = true;
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    e.sampler = std::make_shared<Sampler>(greedy, 1, s.prompt);
    e.num_logprobs = static_cast<int>(model_->config().vocab_size);
    return e;
  }

  std::string dir_;
  std::unique_ptr<Model> model_;
};

using rank_threads::DeviceCopy;
using rank_threads::Probabilities;

TEST_P(ExpertParallelTest, RanksMatchOneExecutorHoldingEveryExpert) {
  const Case& c = GetParam();
  const int world = c.world_size;
  const int num_experts = model_->config().moe.num_experts;
  dist::ExpertPlacement placement = dist::EvenPlacement(num_experts, world);
  if (!c.replicas.empty()) {
    auto built = dist::PlacementFromReplicas(c.replicas, world);
    ASSERT_TRUE(built.ok()) << built.status();
    placement = *built;
  }
  dist::testing::FakeGroup group(world, std::chrono::milliseconds(60000), DeviceCopy);
  std::vector<std::unique_ptr<DeviceExpertParallelExchange>> exchanges;
  std::vector<std::unique_ptr<CudaExecutor>> ranks;
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  for (int r = 0; r < world; ++r) {
    ASSERT_NE(group.rank(r), nullptr) << "rank " << r << " did not connect";
    exchanges.push_back(std::make_unique<DeviceExpertParallelExchange>(group.rank(r), placement));
    ranks.push_back(MakeExecutor(r % devices, exchanges.back().get()));
    ASSERT_NE(ranks.back(), nullptr);
  }
  auto single = MakeExecutor(0, nullptr);
  ASSERT_NE(single, nullptr);
  // Each rank keeps only its experts' weights (a rank with none: the shared weights only).
  for (auto& rank : ranks) EXPECT_LT(rank->weight_bytes(), single->weight_bytes());

  // Rank 0 runs two sequences (one prompt crossing a page), rank 1 one that sits out decode
  // step 2 (rank 1 then has no work), a third rank one more.
  std::vector<TestSequence> seqs(static_cast<size_t>(world + 1));
  for (size_t i = 0; i < seqs.size(); ++i) {
    TestSequence& s = seqs[i];
    s.rank = i == 0 ? 0 : static_cast<int>(i) - 1;
    const int length = i == 0 ? 70 : 9 + 7 * static_cast<int>(i);
    for (int t = 0; t < length; ++t)
      s.prompt.push_back((t * 37 + static_cast<int>(i) * 101 + 3) % 997);
    if (s.rank == 1) s.idle_step = 2;
  }
  const int64_t vocab = model_->config().vocab_size;
  double worst = 0.0;
  for (int step = 0; step < 4; ++step) {
    std::vector<StepPlan> plans(static_cast<size_t>(world));
    StepPlan all;
    std::vector<std::pair<int, size_t>> where;  // per sequence in `all`: (rank, index there)
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i].idle_step == step) continue;
      StepPlan& plan = plans[static_cast<size_t>(seqs[i].rank)];
      where.push_back({seqs[i].rank, plan.sequences.size()});
      plan.sequences.push_back(Entry(static_cast<int>(i), seqs[i], step));
      all.sequences.push_back(Entry(static_cast<int>(i), seqs[i], step));
    }
    std::vector<StepResult> results(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      plans[static_cast<size_t>(r)].step_id = step;
      threads.emplace_back([&, r] {
        results[static_cast<size_t>(r)] =
            ranks[static_cast<size_t>(r)]->Execute(plans[static_cast<size_t>(r)]);
      });
    }
    for (std::thread& t : threads) t.join();
    all.step_id = step;
    const StepResult reference = single->Execute(all);
    ASSERT_EQ(reference.sampled.size(), where.size());
    size_t k = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i].idle_step == step) continue;
      const auto [rank, index] = where[k];
      const SampledToken& got = results[static_cast<size_t>(rank)].sampled[index];
      const SampledToken& want = reference.sampled[k++];
      EXPECT_EQ(got.token_id, want.token_id) << "step " << step << " sequence " << i;
      const std::vector<double> p = Probabilities(got, vocab), q = Probabilities(want, vocab);
      for (int64_t v = 0; v < vocab; ++v) worst = std::max(worst, std::fabs(p[v] - q[v]));
      seqs[i].computed += static_cast<int64_t>(step == 0 ? seqs[i].prompt.size() : 1);
      seqs[i].next = want.token_id;
    }
    // Every (row, expert) pair counted once over the group, as the single executor counts it.
    std::vector<int64_t> sum(static_cast<size_t>(num_experts), 0);
    for (const StepResult& r : results) {
      ASSERT_EQ(r.expert_tokens.size(), static_cast<size_t>(num_experts));
      for (int e = 0; e < num_experts; ++e) sum[e] += r.expert_tokens[e];
    }
    EXPECT_EQ(sum, reference.expert_tokens) << "step " << step;
  }
  std::printf("[relerr] kernel=ExpertParallel case=%s relerr=%.3e tol=%.1e %s\n", c.name.c_str(),
              worst, kProbabilityTolerance, worst <= kProbabilityTolerance ? "ok" : "FAIL");
  EXPECT_LE(worst, kProbabilityTolerance);
  int moe_layers = 0;
  for (const auto& layer : model_->weights().layers) moe_layers += layer.moe ? 1 : 0;
  int64_t received = 0, to_self = 0, dispatched = 0;
  for (auto& e : exchanges) {
    const dist::ExpertExchangeStats s = e->stats();
    EXPECT_EQ(s.num_exchanges, 4 * moe_layers) << "every layer, every step";
    received += s.rows_received;
    dispatched += s.rows_dispatched;
    to_self += s.rows_to_self;
  }
  EXPECT_EQ(received, dispatched);
  EXPECT_LT(to_self, dispatched) << "no row crossed ranks";
  for (auto& rank : ranks) EXPECT_EQ(rank->graph_replays(), 0) << "the exchange waits for the host";
}

INSTANTIATE_TEST_SUITE_P(
    Placements, ExpertParallelTest,
    testing::Values(
        Case{"k3_even2", "k3", 2, {}}, Case{"kimi_linear_even2", "kimi-linear", 2, {}},
        // 8 experts on 3 ranks: rank 0 six (0-5), rank 1 three (5-7: expert 5 on
        // both), rank 2 none (it only sends its rows away).
        Case{"k3_uneven3_replicas", "k3", 3, {{0}, {0}, {0}, {0}, {0}, {0, 1}, {1}, {1}}}),
    [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace strata::engine::cuda
