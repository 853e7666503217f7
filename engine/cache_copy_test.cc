// Copies between the CPU executor's caches and the offload tiers (StepPlan::cache_saves /
// cache_loads, engine/step.h), on tiny generated checkpoints of both families (MLA and KDA
// layers):
// - a save returns exactly the unit's arena bytes (a block: block_bytes(); a checkpoint or a
//   slot: state_bytes_per_sequence(), the state and conv rows of every KDA layer), saves run
//   before the step's loads, and a load followed by a save gives the bytes back;
// - the property the tiers rely on: a fresh executor that loads a prompt's full blocks (into
//   other block ids) and its KDA checkpoint (into another live slot, or into a checkpoint it
//   then starts the slot from) computes the rest of the prompt bit for bit as the executor that
//   computed it all;
// - a load of the wrong size dies; under tensor parallelism each rank takes its share.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cache_copy.h"
#include "engine/demo/checkpoint_generator.h"
#include "engine/executor.h"
#include "engine/model.h"
#include "engine/sampling.h"
#include "engine/step.h"
#include "kvcache/memory_planner.h"

namespace strata::engine {
namespace {

constexpr int kBlockSize = 8;
constexpr int32_t kNumBlocks = 12;
constexpr int32_t kNumSlots = 2;
constexpr int32_t kNumCheckpoints = 2;
constexpr int64_t kPrefix = 2 * kBlockSize;  // the full blocks E1 computes first
constexpr int64_t kPromptLength = kPrefix + 5;

class CacheCopyTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/cache_copy_" + GetParam() + "_" + std::to_string(::getpid());
    demo::GeneratorOptions options;
    options.family = GetParam();
    options.preset = "tiny";
    options.seed = 13;
    auto generated = demo::GenerateCheckpoint(options, dir_);
    ASSERT_TRUE(generated.ok()) << generated.status();
    auto model = Model::Load(dir_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    layout_ = kvcache::LayoutWithPools(CacheSpecFor(model_->config()), kBlockSize, kNumBlocks,
                                       kNumSlots, kNumCheckpoints);
    ASSERT_GT(layout_.num_mla_layers, 0);
    ASSERT_GT(layout_.num_kda_layers, 0);
    const int64_t vocab = model_->config().vocab_size;
    for (int64_t i = 0; i < kPromptLength; ++i) {
      prompt_.push_back(static_cast<int32_t>((i * 37 + 5) % vocab));
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Prompt tokens [begin, end) on top of `begin` computed ones.
  ScheduledSequence Chunk(int64_t begin, int64_t end, std::vector<int32_t> blocks, int32_t slot,
                          SlotInit init) const {
    ScheduledSequence s;
    s.seq_id = 1;
    s.token_ids.assign(prompt_.begin() + begin, prompt_.begin() + end);
    s.num_computed_tokens = begin;
    s.block_table = std::move(blocks);
    s.slot = slot;
    s.slot_init = init;
    return s;
  }

  // The prompt's tail after the two full blocks: scores every next prompt token (raw logits of
  // each row) and samples the last row greedily with the whole distribution.
  ScheduledSequence Tail(std::vector<int32_t> blocks, int32_t slot, SlotInit init) const {
    ScheduledSequence s = Chunk(kPrefix, kPromptLength, std::move(blocks), slot, init);
    s.score_targets.assign(prompt_.begin() + kPrefix + 1, prompt_.end());
    s.num_score_logprobs = 5;
    s.sample = true;
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    s.sampler = std::make_shared<Sampler>(greedy, 1, prompt_);
    s.num_logprobs = static_cast<int>(model_->config().vocab_size);
    return s;
  }

  // One KDA state row's bytes (state, then conv, by layer: CacheLayout::StateRowSpans).
  std::string StateRowBytes(const CpuExecutor& e, int32_t row) const {
    std::string bytes;
    for (int j = 0; j < layout_.num_kda_layers; ++j) {
      bytes.append(reinterpret_cast<const char*>(e.StateRow(j, row)),
                   static_cast<size_t>(layout_.kda_state_bytes_per_layer));
      bytes.append(reinterpret_cast<const char*>(e.ConvRow(j, row)),
                   static_cast<size_t>(layout_.kda_conv_bytes_per_layer));
    }
    return bytes;
  }

  std::string dir_;
  std::unique_ptr<Model> model_;
  kvcache::CacheLayout layout_;
  std::vector<int32_t> prompt_;
};

StepPlan SavePlan(const std::vector<CacheSave>& saves) {
  StepPlan plan;
  plan.cache_saves = saves;
  return plan;
}

// Float for float (bit patterns), every sampled and scored value of the tail's step.
void ExpectSameResults(const StepResult& got, const StepResult& want) {
  ASSERT_EQ(got.sampled.size(), 1u);
  ASSERT_EQ(want.sampled.size(), 1u);
  const SampledToken& g = got.sampled[0];
  const SampledToken& w = want.sampled[0];
  EXPECT_EQ(g.token_id, w.token_id);
  EXPECT_EQ(std::memcmp(&g.logprob, &w.logprob, sizeof(float)), 0) << g.logprob << " " << w.logprob;
  ASSERT_EQ(g.top_logprobs.size(), w.top_logprobs.size());
  ASSERT_FALSE(w.top_logprobs.empty());
  int differing = 0;
  for (size_t i = 0; i < w.top_logprobs.size(); ++i) {
    differing +=
        g.top_logprobs[i].token_id != w.top_logprobs[i].token_id ||
        std::memcmp(&g.top_logprobs[i].logprob, &w.top_logprobs[i].logprob, sizeof(float)) != 0;
  }
  EXPECT_EQ(differing, 0) << "of " << w.top_logprobs.size() << " log-probabilities";
  ASSERT_EQ(got.scored.size(), 1u);
  ASSERT_EQ(want.scored.size(), 1u);
  ASSERT_EQ(got.scored[0].scores.size(), want.scored[0].scores.size());
  for (size_t i = 0; i < want.scored[0].scores.size(); ++i) {
    const TokenScore& gs = got.scored[0].scores[i];
    const TokenScore& ws = want.scored[0].scores[i];
    EXPECT_EQ(gs.token_id, ws.token_id) << "target " << i;
    EXPECT_EQ(std::memcmp(&gs.logprob, &ws.logprob, sizeof(float)), 0)
        << "target " << i << ": " << gs.logprob << " vs " << ws.logprob;
    EXPECT_EQ(gs.rank, ws.rank) << "target " << i;
    ASSERT_EQ(gs.top.size(), ws.top.size());
    for (size_t k = 0; k < ws.top.size(); ++k) {
      EXPECT_EQ(gs.top[k].token_id, ws.top[k].token_id) << "target " << i << " rank " << k;
      EXPECT_EQ(std::memcmp(&gs.top[k].logprob, &ws.top[k].logprob, sizeof(float)), 0)
          << "target " << i << " rank " << k;
    }
  }
}

// The scored log-probabilities of two results differ somewhere (the comparison above can fail).
bool ScoresDiffer(const StepResult& a, const StepResult& b) {
  if (a.scored.size() != 1 || b.scored.size() != 1) return true;
  if (a.scored[0].scores.size() != b.scored[0].scores.size()) return true;
  for (size_t i = 0; i < a.scored[0].scores.size(); ++i) {
    if (a.scored[0].scores[i].logprob != b.scored[0].scores[i].logprob) return true;
  }
  return false;
}

TEST_P(CacheCopyTest, SavesReturnTheUnitsBytesAndLoadsPutThemBack) {
  CpuExecutor e(*model_, layout_);
  StepPlan first;
  first.sequences.push_back(Chunk(0, kPrefix, {4, 2}, 1, SlotInit::kZero));
  first.sequences[0].save_checkpoints = {{0, kPrefix}};
  e.Execute(first);

  const StepResult saved = e.Execute(SavePlan({{CacheUnit::kBlock, 4},
                                               {CacheUnit::kBlock, 2},
                                               {CacheUnit::kCheckpoint, 0},
                                               {CacheUnit::kSlot, 1}}));
  EXPECT_TRUE(saved.sampled.empty());
  ASSERT_EQ(saved.saved.size(), 4u);
  EXPECT_EQ(std::ssize(saved.saved[0]), layout_.block_bytes());
  EXPECT_EQ(std::ssize(saved.saved[1]), layout_.block_bytes());
  EXPECT_TRUE(saved.saved[0] != saved.saved[1]);
  EXPECT_TRUE(saved.saved[0] != std::string(saved.saved[0].size(), '\0')) << "block never written";
  EXPECT_EQ(std::ssize(saved.saved[2]), layout_.state_bytes_per_sequence());
  EXPECT_EQ(std::ssize(saved.saved[3]), layout_.state_bytes_per_sequence());
  // The state unit's bytes are the arena's rows; the checkpoint saved at the chunk's end holds
  // the slot's state after it.
  EXPECT_TRUE(saved.saved[2] == StateRowBytes(e, layout_.CheckpointRow(0)));
  EXPECT_TRUE(saved.saved[3] == StateRowBytes(e, layout_.SlotRow(1)));
  EXPECT_TRUE(saved.saved[2] == saved.saved[3]);
  EXPECT_TRUE(saved.saved[2] != std::string(saved.saved[2].size(), '\0')) << "state never written";

  // Loads into other units; a save of one in the same plan still sees its old bytes.
  StepPlan load;
  load.cache_loads = {{CacheUnit::kBlock, 9, saved.saved[0]},
                      {CacheUnit::kBlock, 10, saved.saved[1]},
                      {CacheUnit::kCheckpoint, 1, saved.saved[2]},
                      {CacheUnit::kSlot, 0, saved.saved[3]}};
  load.cache_saves = {{CacheUnit::kBlock, 9}, {CacheUnit::kCheckpoint, 1}};
  const StepResult loaded = e.Execute(load);
  ASSERT_EQ(loaded.saved.size(), 2u);
  EXPECT_TRUE(loaded.saved[0] == std::string(saved.saved[0].size(), '\0')) << "block 9 before";
  EXPECT_TRUE(loaded.saved[1] == std::string(saved.saved[2].size(), '\0')) << "checkpoint 1 before";
  EXPECT_TRUE(StateRowBytes(e, layout_.CheckpointRow(1)) == saved.saved[2]);
  EXPECT_TRUE(StateRowBytes(e, layout_.SlotRow(0)) == saved.saved[3]);

  const StepResult again = e.Execute(SavePlan({{CacheUnit::kBlock, 9},
                                               {CacheUnit::kBlock, 10},
                                               {CacheUnit::kCheckpoint, 1},
                                               {CacheUnit::kSlot, 0},
                                               {CacheUnit::kBlock, 4}}));
  ASSERT_EQ(again.saved.size(), 5u);
  EXPECT_TRUE(again.saved[0] == saved.saved[0]);
  EXPECT_TRUE(again.saved[1] == saved.saved[1]);
  EXPECT_TRUE(again.saved[2] == saved.saved[2]);
  EXPECT_TRUE(again.saved[3] == saved.saved[3]);
  EXPECT_TRUE(again.saved[4] == saved.saved[0]) << "a save leaves the unit as it was";
}

// E1 computes the prompt in two chunks (saving a checkpoint after the two full blocks); E2,
// fresh, loads E1's two blocks and checkpoint and computes only the tail: the same bits.
TEST_P(CacheCopyTest, LoadedBlocksAndStateGiveTheComputedPrefixsResultsBitForBit) {
  CpuExecutor e1(*model_, layout_);
  StepPlan head;
  head.sequences.push_back(Chunk(0, kPrefix, {0, 1}, 0, SlotInit::kZero));
  head.sequences[0].save_checkpoints = {{0, kPrefix}};
  e1.Execute(head);
  StepPlan tail;
  tail.step_id = 1;
  tail.sequences.push_back(Tail({0, 1, 2}, 0, SlotInit::kCarry));
  const StepResult want = e1.Execute(tail);
  ASSERT_EQ(want.sampled.size(), 1u);
  ASSERT_EQ(want.scored.size(), 1u);
  ASSERT_EQ(std::ssize(want.scored[0].scores), kPromptLength - kPrefix - 1);

  const StepResult saved = e1.Execute(
      SavePlan({{CacheUnit::kBlock, 0}, {CacheUnit::kBlock, 1}, {CacheUnit::kCheckpoint, 0}}));
  ASSERT_EQ(saved.saved.size(), 3u);

  // Into another live slot, carried from there.
  {
    CpuExecutor e2(*model_, layout_);
    StepPlan plan;
    plan.cache_loads = {{CacheUnit::kBlock, 7, saved.saved[0]},
                        {CacheUnit::kBlock, 5, saved.saved[1]},
                        {CacheUnit::kSlot, 1, saved.saved[2]}};
    plan.sequences.push_back(Tail({7, 5, 3}, 1, SlotInit::kCarry));
    SCOPED_TRACE("loaded into slot 1");
    ExpectSameResults(e2.Execute(plan), want);
  }
  // Into a checkpoint the slot starts from (a prefix hit on a loaded checkpoint).
  {
    CpuExecutor e2(*model_, layout_);
    StepPlan plan;
    plan.cache_loads = {{CacheUnit::kBlock, 11, saved.saved[0]},
                        {CacheUnit::kBlock, 8, saved.saved[1]},
                        {CacheUnit::kCheckpoint, 1, saved.saved[2]}};
    ScheduledSequence s = Tail({11, 8, 6}, 0, SlotInit::kFromCheckpoint);
    s.source_checkpoint = 1;
    plan.sequences.push_back(std::move(s));
    SCOPED_TRACE("loaded into checkpoint 1");
    ExpectSameResults(e2.Execute(plan), want);
  }
  // Controls: the tail's results depend on both kinds of unit (without the state, or with the
  // blocks swapped, they differ).
  {
    CpuExecutor e3(*model_, layout_);
    StepPlan plan;
    plan.cache_loads = {{CacheUnit::kBlock, 7, saved.saved[0]},
                        {CacheUnit::kBlock, 5, saved.saved[1]}};
    plan.sequences.push_back(Tail({7, 5, 3}, 1, SlotInit::kZero));
    EXPECT_TRUE(ScoresDiffer(e3.Execute(plan), want)) << "the KDA state does not matter";
  }
  {
    CpuExecutor e3(*model_, layout_);
    StepPlan plan;
    plan.cache_loads = {{CacheUnit::kBlock, 7, saved.saved[1]},
                        {CacheUnit::kBlock, 5, saved.saved[0]},
                        {CacheUnit::kSlot, 1, saved.saved[2]}};
    plan.sequences.push_back(Tail({7, 5, 3}, 1, SlotInit::kCarry));
    EXPECT_TRUE(ScoresDiffer(e3.Execute(plan), want)) << "the MLA blocks do not matter";
  }
}

TEST_P(CacheCopyTest, LoadsOfTheWrongSizeDie) {
  CpuExecutor e(*model_, layout_);
  auto load = [&](CacheUnit unit, int64_t bytes) {
    StepPlan plan;
    plan.cache_loads = {{unit, 1, std::string(static_cast<size_t>(bytes), '\1')}};
    e.Execute(plan);
  };
  EXPECT_DEATH(load(CacheUnit::kBlock, layout_.block_bytes() - 1), "cache load of the wrong size");
  EXPECT_DEATH(load(CacheUnit::kBlock, layout_.block_bytes() + 1), "cache load of the wrong size");
  EXPECT_DEATH(load(CacheUnit::kSlot, layout_.state_bytes_per_sequence() - 4),
               "cache load of the wrong size");
  EXPECT_DEATH(load(CacheUnit::kCheckpoint, layout_.state_bytes_per_sequence() + 4),
               "cache load of the wrong size");
  load(CacheUnit::kBlock, layout_.block_bytes());  // the right size loads
  EXPECT_TRUE(e.Execute(SavePlan({{CacheUnit::kBlock, 1}})).saved[0] ==
              std::string(static_cast<size_t>(layout_.block_bytes()), '\1'));
}

// Under tensor parallelism a tier entry holds a unit's distinct shares (CacheShares): rank 3 of
// a group of 4 with context-parallel groups of 2 takes share 1 of a block's 2 and share 3 of a
// state row's 4; an entry of one share is the wrong size there.
TEST_P(CacheCopyTest, LoadsTakeTheRanksShare) {
  const CacheShares shares{3, 4, 2};
  EXPECT_EQ(shares.Count(CacheUnit::kBlock), 2);
  EXPECT_EQ(shares.Index(CacheUnit::kBlock), 1);
  EXPECT_EQ(shares.Count(CacheUnit::kCheckpoint), 4);
  EXPECT_EQ(shares.Index(CacheUnit::kSlot), 3);
  std::string arena(static_cast<size_t>(layout_.TotalBytes()), '\0');
  auto copy_out = [&](int64_t offset, int64_t bytes, char* to) {
    std::memcpy(to, arena.data() + offset, static_cast<size_t>(bytes));
    return absl::OkStatus();
  };
  auto copy_in = [&](const CacheLoad&, const char* from, int64_t offset, int64_t bytes) {
    std::memcpy(arena.data() + offset, from, static_cast<size_t>(bytes));
    return absl::OkStatus();
  };
  // Share i of an entry is filled with the byte i + 1.
  auto entry = [](int64_t unit_bytes, int count) {
    std::string bytes;
    for (int i = 0; i < count; ++i) bytes += std::string(static_cast<size_t>(unit_bytes), 1 + i);
    return bytes;
  };
  StepPlan plan;
  plan.cache_loads = {{CacheUnit::kBlock, 2, entry(layout_.block_bytes(), 2)},
                      {CacheUnit::kCheckpoint, 1, entry(layout_.state_bytes_per_sequence(), 4)}};
  StepResult result;
  std::vector<kvcache::CacheSpan> spans;
  ASSERT_TRUE(CopyCacheUnits(plan, layout_, &result, &spans, copy_out, copy_in, shares).ok());
  StepPlan save;
  save.cache_saves = {{CacheUnit::kBlock, 2}, {CacheUnit::kCheckpoint, 1}};
  ASSERT_TRUE(CopyCacheUnits(save, layout_, &result, &spans, copy_out, copy_in, shares).ok());
  EXPECT_EQ(result.saved[0], std::string(static_cast<size_t>(layout_.block_bytes()), 2));
  EXPECT_EQ(result.saved[1],
            std::string(static_cast<size_t>(layout_.state_bytes_per_sequence()), 4));
  plan.cache_loads = {{CacheUnit::kBlock, 2, entry(layout_.block_bytes(), 1)}};
  EXPECT_DEATH((void)CopyCacheUnits(plan, layout_, &result, &spans, copy_out, copy_in, shares),
               "cache load of the wrong size");
}

INSTANTIATE_TEST_SUITE_P(Families, CacheCopyTest, testing::Values("k3", "kimi-linear"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param == "k3" ? std::string("k3") : "kimi_linear";
                         });

}  // namespace
}  // namespace strata::engine
