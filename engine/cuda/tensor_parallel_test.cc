// CUDA tensor parallelism (cuda_model.h, CudaModelOptions::tensor_parallel) against one executor
// holding the whole model. The ranks are threads of one process, each with its shard of the
// checkpoint (engine/tensor_parallel.h) on its own (emulated) device, joined by the in-process
// communicator (dist/testing/fake_communicator.h) whose collectives run as host functions on each
// rank's stream (HostFunctionCollectives, device_collectives.h): they add in host memory, which is
// device memory on the CPU emulator only, so this test runs there (every test run); on GPUs a
// group is NCCL over one GPU per rank (dist_nccl_communicator_test covers the collectives).
//
// The lead executes the plans and samples; the followers run each plan through FollowStep. Every
// sequence must get the single executor's distribution, step by step (teacher forcing with the
// single executor's greedy tokens). A rank's GEMMs sum over its share of the inputs and the group
// adds the shares, so the f32 sums round differently from the single executor's, and the bf16
// rounding of a later GEMM operand may then move by one ulp (2⁻⁸ relative): tolerance 5e-3 on
// probabilities (measured at most 2.2e-3, 3.3e-3 with context parallelism, whose split of each
// softmax over the ranks rounds P to bf16 against each rank's own maximum; the single-rank CUDA
// path itself is ~1e-2 from the f32 CPU path, cuda_executor_test.cc). A greedy token may differ
// only where the single executor's two best tokens are that close (a near-tie of these flat random
// models).
//
// Covered: K3 (KDA and MLA with q-LoRA, LatentMoE whose latent sum is reduced before latent_norm,
// shared experts, AttnRes, a tied head) and Kimi-Linear (experts on the hidden width, an untied
// head), over 2 and 4 ranks; a vocabulary (997) that 2 and 4 do not divide; a prompt crossing a
// page, a KDA checkpoint save, decode steps, a step verifying drafts (the followers' KDA states
// replay what the lead's sampler accepted: later steps would differ otherwise); the weights each
// rank holds; the decode steps as CUDA graphs on every rank (captured at the first decode step,
// replayed at the last, the collectives inside). With decode context parallelism (dcp cases)
// each rank's cache holds every C-th position and the MLA layers merge the ranks' partial
// attention: queries at the first positions see no row of the other ranks; with C < T the C
// ranks of each context-parallel group have their own communicator.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/check.h"
#include "dist/tensor_parallel_group.h"
#include "dist/testing/fake_communicator.h"
#include "engine/cuda/cuda_executor.h"
#include "engine/cuda/device_collectives.h"
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
constexpr double kProbabilityTolerance = 5e-3;

struct Case {
  std::string name, family;
  int tp_size = 2;
  bool tied = false;
  int dcp_size = 1;  // --decode-context-parallel-size (divides tp_size)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

using rank_threads::Probabilities;

class CudaTensorParallelTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!kernels::cuda::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
#if !defined(STRATA_CUDA_EMU)
    GTEST_SKIP() << "the in-process group adds in host memory: on GPUs a tensor-parallel group "
                    "is NCCL over one GPU per rank";
#endif
    dir_ = testing::TempDir() + "/cuda_tp_" + GetParam().name + "_" + std::to_string(getpid());
    engine::demo::GeneratorOptions options;
    options.family = GetParam().family;
    options.preset = "tiny";
    options.seed = 13;
    options.overrides = engine::demo::CudaShapeOverrides();
    options.overrides.insert({{"layers", "3"},
                              {"vocab", "997"},
                              {"topk", "3"},
                              {"kda_heads", "4"},
                              {"mla_heads", "4"},
                              {"tie_embeddings", GetParam().tied ? "true" : "false"}});
    auto generated = engine::demo::GenerateCheckpoint(options, dir_);
    ASSERT_TRUE(generated.ok()) << generated.status();
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  kvcache::CacheLayout Layout(const Model& model) const {
    return kvcache::LayoutWithPools(CudaCacheSpecFor(model.config()), kBlockSize, kNumBlocks,
                                    kNumSlots, 2);
  }

  // `mha_prefill`: prompt rows in the MHA form (else the absorbed form, which is what the ranks
  // of a context-parallel group compute: comparing like with like isolates the merge).
  // `device`: the rank's own (a device synchronisation waits for its streams only).
  std::unique_ptr<CudaExecutor> MakeExecutor(const Model& model, TensorParallelGroup* group,
                                             DeviceCollectives* collectives,
                                             DeviceCollectives* context_parallel, int device,
                                             bool mha_prefill = true) {
    CudaExecutorOptions options;
    options.device = device;
    options.model.mha_prefill = mha_prefill;
    options.model.tensor_parallel = collectives;
    options.model.context_parallel = context_parallel;
    options.tensor_parallel_host = group;
    auto created = CudaExecutor::Create(model, options);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return nullptr;
    EXPECT_TRUE((*created)->AllocateCaches(Layout(model)).ok());
    return std::move(*created);
  }

  std::string dir_;
};

TEST_P(CudaTensorParallelTest, RanksMatchOneExecutorHoldingTheWholeModel) {
  const Case& c = GetParam();
  const int world = c.tp_size;
  auto whole = Model::Load(dir_);
  ASSERT_TRUE(whole.ok()) << whole.status();
  std::vector<std::unique_ptr<Model>> shards;
  for (int r = 0; r < world; ++r) {
    ModelLoadOptions load;
    load.tensor_parallel = {r, world};
    load.decode_context_parallel_size = c.dcp_size;
    auto shard = Model::Load(dir_, load);
    ASSERT_TRUE(shard.ok()) << shard.status();
    shards.push_back(std::move(*shard));
  }
  // Host memory is device memory here: plain copies (a host function may not call CUDA).
  dist::testing::FakeGroup comms(world);
  // C < T: each context-parallel group of C consecutive ranks has its own communicator.
  const bool cp_groups = c.dcp_size > 1 && c.dcp_size < world;
  std::vector<std::unique_ptr<dist::testing::FakeGroup>> cp_comms;
  for (int g = 0; cp_groups && g < world / c.dcp_size; ++g) {
    cp_comms.push_back(std::make_unique<dist::testing::FakeGroup>(c.dcp_size));
  }
  std::vector<std::unique_ptr<dist::CommunicatorTensorParallelGroup>> groups, cp_host;
  std::vector<std::unique_ptr<HostFunctionCollectives>> collectives, cp_collectives;
  std::vector<std::unique_ptr<CudaExecutor>> ranks;
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  ASSERT_GE(devices, world) << "one emulated device per rank";
  for (int r = 0; r < world; ++r) {
    ASSERT_NE(comms.rank(r), nullptr) << "rank " << r << " did not connect";
    groups.push_back(std::make_unique<dist::CommunicatorTensorParallelGroup>(comms.rank(r)));
    collectives.push_back(std::make_unique<HostFunctionCollectives>(groups.back().get()));
    DeviceCollectives* cp = nullptr;
    if (cp_groups) {
      dist::Communicator* comm =
          cp_comms[static_cast<size_t>(r / c.dcp_size)]->rank(r % c.dcp_size);
      ASSERT_NE(comm, nullptr);
      cp_host.push_back(std::make_unique<dist::CommunicatorTensorParallelGroup>(comm));
      cp_collectives.push_back(std::make_unique<HostFunctionCollectives>(cp_host.back().get()));
      cp = cp_collectives.back().get();
    }
    ranks.push_back(MakeExecutor(*shards[static_cast<size_t>(r)], groups.back().get(),
                                 collectives.back().get(), cp, r));
    ASSERT_NE(ranks.back(), nullptr);
  }
  auto single = MakeExecutor(**whole, nullptr, nullptr, nullptr, 0,
                             /*mha_prefill=*/c.dcp_size == 1);
  ASSERT_NE(single, nullptr);
  // Each rank holds its share: less than the whole model, and the group not much more than it
  // (the replicated parts: norms, the latent down-projections, the routers).
  int64_t group_bytes = 0;
  for (auto& rank : ranks) {
    EXPECT_LT(rank->weight_bytes(), single->weight_bytes());
    group_bytes += rank->weight_bytes();
  }
  EXPECT_LT(group_bytes, 2 * single->weight_bytes());

  // Three sequences: a 70-token prompt (crossing a page, saving a KDA checkpoint at 64), two
  // short ones; then three decode steps.
  const ModelConfig& cfg = (*whole)->config();
  const int64_t vocab = cfg.vocab_size;
  const bool kda = cfg.NumKdaLayers() > 0;
  struct Seq {
    std::vector<int32_t> prompt;
    int64_t computed = 0;
    int32_t next = 0;
  };
  std::vector<Seq> seqs(3);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int length = i == 0 ? 70 : 9 + 7 * static_cast<int>(i);
    for (int t = 0; t < length; ++t) {
      seqs[i].prompt.push_back((t * 37 + static_cast<int>(i) * 101 + 3) % 997);
    }
  }
  double worst = 0.0;
  int same_tokens = 0, tokens = 0;
  std::vector<int64_t> records_after_capture;
  for (int step = 0; step < 4; ++step) {
    StepPlan plan;
    plan.step_id = step;
    for (size_t i = 0; i < seqs.size(); ++i) {
      ScheduledSequence e;
      e.seq_id = static_cast<int64_t>(i) + 1;
      e.token_ids = step == 0 ? seqs[i].prompt : std::vector<int32_t>{seqs[i].next};
      e.num_computed_tokens = seqs[i].computed;
      e.block_table = {2 * static_cast<int32_t>(i), 2 * static_cast<int32_t>(i) + 1};
      e.slot = kda ? static_cast<int32_t>(i) : -1;
      e.slot_init = step == 0 ? SlotInit::kZero : SlotInit::kCarry;
      if (kda && step == 0 && i == 0) e.save_checkpoints = {{0, 64}};
      e.sample = true;
      SamplingParams greedy;
      greedy.temperature = 0.0f;
      e.sampler = std::make_shared<Sampler>(greedy, 1, seqs[i].prompt);
      e.num_logprobs = static_cast<int>(vocab);
      if (step == 2 && i == 0) {  // two drafts: the followers replay what the lead accepted
        e.token_ids.push_back(995);
        e.token_ids.push_back(996);
        e.num_draft_tokens = 2;
      }
      plan.sequences.push_back(std::move(e));
    }
    StepResult lead;
    std::vector<int64_t> followed(static_cast<size_t>(world), -2);
    std::vector<std::thread> threads;
    for (int r = 1; r < world; ++r) {
      threads.emplace_back([&, r] {
        followed[static_cast<size_t>(r)] = ranks[static_cast<size_t>(r)]->FollowStep();
      });
    }
    lead = ranks[0]->Execute(plan);
    for (std::thread& t : threads) t.join();
    for (int r = 1; r < world; ++r) EXPECT_EQ(followed[static_cast<size_t>(r)], step);
    // Step 1 captured the decode graph: its collectives' records stay with it; the eager steps'
    // are reused (step 2 verifies drafts eagerly, step 3 replays).
    if (step == 1) {
      for (auto& group : collectives) records_after_capture.push_back(group->records());
    } else if (step > 1) {
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(collectives[static_cast<size_t>(r)]->records(),
                  records_after_capture[static_cast<size_t>(r)])
            << "rank " << r << " step " << step;
      }
    }
    const StepResult reference = single->Execute(plan);
    ASSERT_EQ(lead.sampled.size(), reference.sampled.size());
    // Entries in plan order: one per sequence, 1 + accepted drafts for the drafting one.
    const size_t drafting_entries = lead.sampled.size() - (seqs.size() - 1);
    size_t entry = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const size_t entries = step == 2 && i == 0 ? drafting_entries : 1;
      for (size_t k = 0; k + 1 < entries; ++k, ++entry) {  // accepted drafts: the same tokens
        EXPECT_EQ(lead.sampled[entry].token_id, reference.sampled[entry].token_id);
      }
      const SampledToken& got = lead.sampled[entry];
      const SampledToken& want = reference.sampled[entry++];
      const std::vector<double> p = Probabilities(got, vocab), q = Probabilities(want, vocab);
      for (int64_t v = 0; v < vocab; ++v) worst = std::max(worst, std::fabs(p[v] - q[v]));
      ++tokens;
      if (got.token_id == want.token_id) {
        ++same_tokens;
      } else {
        std::vector<double> sorted = q;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        EXPECT_LE(sorted[0] - sorted[1], kProbabilityTolerance)
            << "step " << step << " sequence " << i << ": token " << got.token_id << " vs "
            << want.token_id << " without a near-tie";
      }
      seqs[i].computed += static_cast<int64_t>(step == 0 ? seqs[i].prompt.size() : entries);
      seqs[i].next = want.token_id;
    }
  }
  std::printf("[relerr] kernel=TensorParallel case=%s relerr=%.3e tol=%.1e %s\n", c.name.c_str(),
              worst, kProbabilityTolerance, worst <= kProbabilityTolerance ? "ok" : "FAIL");
  EXPECT_LE(worst, kProbabilityTolerance);
  EXPECT_GE(same_tokens, tokens - 1) << "greedy tokens differ";
  // A checkpoint saved by the group: each rank holds its heads' share of the state.
  if (kda) {
    auto whole_state = single->StateRow(0, single->layout().CheckpointRow(0));
    ASSERT_TRUE(whole_state.ok()) << whole_state.status();
    size_t rank_floats = 0;
    for (auto& rank : ranks) {
      auto part = rank->StateRow(0, rank->layout().CheckpointRow(0));
      ASSERT_TRUE(part.ok()) << part.status();
      rank_floats += part->size();
    }
    EXPECT_EQ(rank_floats, whole_state->size());
  }
  // The lead ends the followers (as `strata bench` does).
  std::vector<std::thread> threads;
  std::vector<int64_t> ended(static_cast<size_t>(world), 0);
  for (int r = 1; r < world; ++r) {
    threads.emplace_back(
        [&, r] { ended[static_cast<size_t>(r)] = ranks[static_cast<size_t>(r)]->FollowStep(); });
  }
  ranks[0]->EndFollowers();
  for (std::thread& t : threads) t.join();
  for (int r = 1; r < world; ++r) EXPECT_EQ(ended[static_cast<size_t>(r)], -1);
  // Both decode steps ran a graph on every rank (captured at step 1, replayed at step 3) with
  // the group's collectives inside: the embedding's, every mixer's and every FFN's all-reduce,
  // the logits all-gather; with C < T the context-parallel group's own records hold every MLA
  // layer's query all-gather and partials' all-to-all.
  const int mla_layers = cfg.num_layers - cfg.NumKdaLayers();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(ranks[static_cast<size_t>(r)]->graph_replays(), 2) << "rank " << r;
    EXPECT_EQ(ranks[static_cast<size_t>(r)]->num_graphs(), 1) << "rank " << r;
    EXPECT_GE(records_after_capture[static_cast<size_t>(r)], 2 * cfg.num_layers + 2)
        << "rank " << r << ": the graph holds the group's collectives";
    if (cp_groups) {
      EXPECT_EQ(cp_collectives[static_cast<size_t>(r)]->records(), 2 * mla_layers)
          << "rank " << r << ": the context-parallel group's collectives (graph only)";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaTensorParallelTest,
                         testing::Values(Case{"k3_tp2_tied", "k3", 2, true},
                                         Case{"k3_tp4", "k3", 4, false},
                                         Case{"kimi_linear_tp2", "kimi-linear", 2, false},
                                         Case{"kimi_linear_tp4_tied", "kimi-linear", 4, true},
                                         Case{"k3_tp2_dcp2", "k3", 2, false, 2},
                                         Case{"kimi_linear_tp4_dcp4", "kimi-linear", 4, true, 4},
                                         Case{"k3_tp4_dcp2", "k3", 4, false, 2}),
                         [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

// A shard without its group is refused with a message.
TEST(CudaTensorParallelRefusalTest, ShardWithoutGroup) {
  if (!kernels::cuda::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = testing::TempDir() + "/cuda_tp_refusal_" + std::to_string(getpid());
  engine::demo::GeneratorOptions options;
  options.family = "k3";
  options.preset = "tiny";
  options.overrides = engine::demo::CudaShapeOverrides();
  options.overrides.insert({{"kda_heads", "4"}, {"mla_heads", "4"}});
  ASSERT_TRUE(engine::demo::GenerateCheckpoint(options, dir).ok());
  for (int dcp : {1, 2}) {
    ModelLoadOptions load;
    load.tensor_parallel = {0, 2};
    load.decode_context_parallel_size = dcp;
    auto shard = Model::Load(dir, load);
    ASSERT_TRUE(shard.ok()) << shard.status();
    auto no_group = CudaExecutor::Create(**shard, {});
    ASSERT_FALSE(no_group.ok());
    EXPECT_NE(no_group.status().message().find("tensor_parallel"), std::string::npos)
        << no_group.status();
  }
  // C < T: the context-parallel group of C ranks is required, and must be this rank's.
  ModelLoadOptions load;
  load.tensor_parallel = {1, 4};
  load.decode_context_parallel_size = 2;
  auto shard = Model::Load(dir, load);
  ASSERT_TRUE(shard.ok()) << shard.status();
  dist::testing::FakeGroup four(4), two(2);
  dist::CommunicatorTensorParallelGroup tp(four.rank(1)), cp_wrong(two.rank(0));
  HostFunctionCollectives tp_collectives(&tp), cp_collectives(&cp_wrong);
  CudaExecutorOptions executor;
  executor.model.tensor_parallel = &tp_collectives;
  executor.tensor_parallel_host = &tp;
  auto no_cp = CudaExecutor::Create(**shard, executor);
  ASSERT_FALSE(no_cp.ok());
  EXPECT_NE(no_cp.status().message().find("context_parallel"), std::string::npos) << no_cp.status();
  executor.model.context_parallel = &cp_collectives;  // rank 0 of 2, but the shard is rank 1
  auto wrong_rank = CudaExecutor::Create(**shard, executor);
  ASSERT_FALSE(wrong_rank.ok());
  EXPECT_NE(wrong_rank.status().message().find("context-parallel rank 1 of 2"), std::string::npos)
      << wrong_rank.status();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::engine::cuda
