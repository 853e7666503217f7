// CPU engine steps run on Strata's one thread pool (kernels/cpu/thread_pool.h): after a long
// prefill (enough rows for every kernel's parallel branch) and decode steps on tiny K3- and
// Kimi-Linear-shaped checkpoints with 2 threads, the process holds only the main thread and
// the pool's named workers. A kernel that opened an `omp parallel` region would leave an
// OpenMP team behind (libgomp keeps its workers), whose spinning takes the pool's cores.
#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/demo/checkpoint_generator.h"
#include "engine/executor.h"
#include "engine/model.h"
#include "engine/sampling.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::engine {
namespace {

constexpr int kBlockSize = 16;
constexpr int kPromptTokens = 720;  // × hidden 96 ≥ the norms' 65,536-element parallel bar
constexpr int kDecodeSteps = 4;
constexpr int kBlocks = (kPromptTokens + kDecodeSteps + kBlockSize - 1) / kBlockSize;

// "tid name" of every thread but the main one that is not a pool worker.
std::vector<std::string> ForeignThreads() {
  std::vector<std::string> foreign;
  const std::string main_tid = std::to_string(::getpid());
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    const std::string tid = entry.path().filename().string();
    if (tid == main_tid) continue;
    std::ifstream comm(entry.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != kernels::cpu::kWorkerName) foreign.push_back(tid + " " + name);
  }
  return foreign;
}

class CpuThreadsTest : public testing::TestWithParam<std::string> {};

TEST_P(CpuThreadsTest, PrefillAndDecodeStartNoThreadButThePools) {
  omp_set_num_threads(2);  // parallel even on a one-core machine
  const std::string dir =
      testing::TempDir() + "/cpu_threads_" + GetParam() + "_" + std::to_string(::getpid());
  engine::demo::GeneratorOptions options;
  options.family = GetParam();
  options.preset = "tiny";
  options.seed = 5;
  ASSERT_TRUE(engine::demo::GenerateCheckpoint(options, dir).ok());
  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(ForeignThreads(), std::vector<std::string>{}) << "before any step";

  const int64_t vocab = (*model)->config().vocab_size;
  const bool has_kda = (*model)->geometry().num_kda_layers > 0;
  CpuExecutor executor(**model, kvcache::LayoutWithPools(CacheSpecFor((*model)->config()),
                                                         kBlockSize, kBlocks, 1, 0));
  StepPlan plan;
  ScheduledSequence seq;
  for (int i = 0; i < kPromptTokens; ++i) {
    seq.token_ids.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  }
  for (int b = 0; b < kBlocks; ++b) seq.block_table.push_back(b);
  seq.slot = has_kda ? 0 : -1;
  seq.slot_init = SlotInit::kZero;
  seq.sample = true;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  seq.sampler = std::make_shared<Sampler>(greedy, 1, seq.token_ids);
  plan.sequences.push_back(std::move(seq));
  StepResult result;
  executor.ExecuteInto(plan, &result);
  for (int step = 0; step < kDecodeSteps; ++step) {
    ScheduledSequence& s = plan.sequences[0];
    ASSERT_EQ(result.sampled.size(), 1u);
    ++plan.step_id;
    s.num_computed_tokens += static_cast<int64_t>(s.token_ids.size());
    s.token_ids = {result.sampled[0].token_id};
    s.slot_init = SlotInit::kCarry;
    executor.ExecuteInto(plan, &result);
  }
  EXPECT_EQ(ForeignThreads(), std::vector<std::string>{})
      << "threads other than the main one and the pool's '" << kernels::cpu::kWorkerName
      << "' workers";
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, CpuThreadsTest, testing::Values("k3", "kimi-linear"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param == "k3" ? std::string("k3")
                                                     : std::string("kimi_linear");
                         });

// Exits 0 when an OpenMP team of two ran and the check sees its worker.
[[noreturn]] void RunOpenMpTeamAndCheck() {
  int team = 0;
#pragma omp parallel num_threads(2)
  {
#pragma omp atomic
    team += 1;
  }
  std::exit(team == 2 && !ForeignThreads().empty() ? 0 : 1);
}

// The check sees an OpenMP team (in a child process, so this one stays clean).
TEST(CpuThreadsCheckTest, SeesAnOpenMpTeam) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(RunOpenMpTeamAndCheck(), testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace strata::engine
