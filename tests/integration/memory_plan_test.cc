// Memory per sequence at 1K / 32K / 128K / 1M tokens: what the scheduler actually holds for one
// sequence (latent pages over all MLA layers + its KDA slot) against the memory planner's
// per-token and per-sequence prediction, for Kimi K3's release cache geometry. They must agree
// within 1% (issues 5 and 45).
#include <cstdio>

#include <gtest/gtest.h>

#include "kvcache/memory_planner.h"
#include "scheduler/scheduler.h"
#include "scheduler/testing/fake_executor.h"

namespace strata {
namespace {

kvcache::ModelCacheSpec K3Spec() {
  kvcache::ModelCacheSpec spec;
  spec.num_mla_layers = 24;
  spec.latent_dim = 576;
  spec.latent_dtype = kvcache::LatentDType::kBF16;
  spec.num_kda_layers = 69;
  spec.kda_state_bytes_per_layer = kvcache::KdaStateBytes(96, 128, 4);
  spec.kda_conv_bytes_per_layer = kvcache::KdaConvBytes(96, 128, 4, 2);
  return spec;
}

TEST(MemoryPlanTest, HeldMemoryPerSequenceMatchesThePlannerWithinOnePercent) {
  kvcache::PlannerOptions options;
  // Room for one 1M-token sequence (27,648 bytes a token: 29.0 GB); the planner only sizes the
  // pools, nothing of it is allocated.
  options.memory_budget_bytes = int64_t{28} << 30;
  options.max_num_seqs = 1;
  options.checkpoint_fraction = 0.0;
  auto layout = kvcache::PlanMemory(K3Spec(), options);
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::printf("%s\n", kvcache::DescribePlan(*layout).c_str());
  for (int64_t tokens :
       {int64_t{1} << 10, int64_t{32} << 10, int64_t{128} << 10, int64_t{1} << 20}) {
    scheduler::SchedulerConfig config;
    config.max_num_seqs = 1;
    config.max_num_batched_tokens = 8192;
    config.max_model_len = tokens + 1;
    config.block_size = layout->block_size;
    config.num_blocks = layout->num_blocks;
    config.num_slots = layout->num_slots;
    config.num_checkpoint_slots = 0;
    config.enable_prefix_caching = false;
    scheduler::Scheduler sched(config);
    scheduler::testing::FakeExecutor exec(layout->num_blocks, layout->block_size, layout->num_slots,
                                          0, 1000);
    scheduler::Request request;
    request.request_id = "long";
    request.prompt.assign(static_cast<size_t>(tokens), 7);
    request.max_tokens = 1;
    request.sampling.temperature = 0.0f;
    ASSERT_TRUE(sched.Add(request).ok());
    // Prefill every chunk but stop before the sequence finishes (and frees its memory).
    int64_t held_blocks = 0;
    while (sched.HasWork()) {
      engine::StepPlan plan = sched.Schedule();
      held_blocks = sched.stats().num_blocks - sched.stats().num_free_blocks;
      bool last = false;
      for (const auto& s : plan.sequences) last = last || s.sample;
      if (last) break;
      sched.Commit(exec.Execute(plan));
    }
    const double held =
        double(held_blocks) * double(layout->page_bytes()) * layout->num_mla_layers +
        double(layout->state_bytes_per_sequence());
    const double predicted = double(layout->mla_bytes_per_token()) * double(tokens) +
                             double(layout->state_bytes_per_sequence());
    std::printf("%7lld tokens: held %.4f GiB, planner %.4f GiB (%.3f%%)\n",
                static_cast<long long>(tokens), held / (1 << 30), predicted / (1 << 30),
                100.0 * (held - predicted) / predicted);
    EXPECT_NEAR(held / predicted, 1.0, 0.01) << tokens << " tokens";
  }
}

}  // namespace
}  // namespace strata
