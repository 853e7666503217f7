#include "kvcache/memory_planner.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::kvcache {
namespace {

using ::testing::HasSubstr;

ModelCacheSpec SmallHybrid() {
  ModelCacheSpec spec;
  spec.num_mla_layers = 2;
  spec.latent_dim = 576;
  spec.latent_dtype = LatentDType::kBF16;
  spec.num_kda_layers = 3;
  spec.kda_state_bytes_per_layer = 1000;
  spec.kda_conv_bytes_per_layer = 24;
  return spec;
}

TEST(MemoryPlannerTest, LayoutWithPoolsTakesTheSpecAndTheGivenPools) {
  const ModelCacheSpec spec = SmallHybrid();
  const CacheLayout layout = LayoutWithPools(spec, 32, 100, 7, 3);
  EXPECT_EQ(layout.num_mla_layers, spec.num_mla_layers);
  EXPECT_EQ(layout.latent_dim, spec.latent_dim);
  EXPECT_EQ(layout.latent_dtype, spec.latent_dtype);
  EXPECT_EQ(layout.num_kda_layers, spec.num_kda_layers);
  EXPECT_EQ(layout.kda_state_bytes_per_layer, spec.kda_state_bytes_per_layer);
  EXPECT_EQ(layout.kda_conv_bytes_per_layer, spec.kda_conv_bytes_per_layer);
  EXPECT_EQ(layout.block_size, 32);
  EXPECT_EQ(layout.num_blocks, 100);
  EXPECT_EQ(layout.num_slots, 7);
  EXPECT_EQ(layout.num_checkpoints, 3);
  EXPECT_TRUE(layout.Validate().ok());
}

TEST(MemoryPlannerTest, SmallHybridArithmetic) {
  PlannerOptions options;
  options.memory_budget_bytes = 1'000'000;
  options.block_size = 4;
  options.max_num_seqs = 10;
  options.checkpoint_fraction = 0.1;
  absl::StatusOr<CacheLayout> layout = PlanMemory(SmallHybrid(), options);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // slot = 3 * (1000 + 24) = 3,072; slack = (2 + 2 * 3) * 256 = 2,048; usable = 997,952;
  // live = 10 * 3,072 = 30,720; rest = 967,232; checkpoints: floor(96,723.2) / 3,072 = 31;
  // rest = 967,232 - 95,232 = 872,000; block = 2 * 4 * 1,152 = 9,216 -> 94 blocks.
  EXPECT_EQ(layout->num_slots, 10);
  EXPECT_EQ(layout->num_checkpoints, 31);
  EXPECT_EQ(layout->num_blocks, 94);
  EXPECT_EQ(layout->num_tokens(), 376);
  // MLA: 2 * 433,152; KDA rows 41: 3 * (align(41,000) + align(984)) = 3 * (41,216 + 1,024).
  EXPECT_EQ(layout->TotalBytes(), 2 * 433152 + 3 * (41216 + 1024));
}

TEST(MemoryPlannerTest, KimiK3OnOneHundredGiB) {
  ModelCacheSpec spec;
  spec.num_mla_layers = 24;
  spec.num_kda_layers = 69;
  spec.kda_state_bytes_per_layer = KdaStateBytes(96, 128, 4);
  spec.kda_conv_bytes_per_layer = KdaConvBytes(96, 128, 4, 2);
  PlannerOptions options;
  options.memory_budget_bytes = int64_t{100} << 30;
  options.max_num_seqs = 16;
  absl::StatusOr<CacheLayout> layout = PlanMemory(spec, options);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // slot = 449,372,160; usable = 107,374,182,400 - 162 * 256 = 107,374,140,928;
  // rest = usable - 16 * slot = 100,184,186,368; checkpoints = 10,018,418,636 / slot = 22;
  // rest -= 22 * slot -> 90,297,998,848; block = 24 * 64 * 1,152 = 1,769,472 -> 51,031.
  EXPECT_EQ(layout->num_checkpoints, 22);
  EXPECT_EQ(layout->num_blocks, 51031);
  EXPECT_EQ(layout->num_tokens(), 3265984);
  EXPECT_EQ(layout->TotalBytes(), 107374067712);
}

TEST(MemoryPlannerTest, TooManySequencesIsAnErrorNamingBytes) {
  PlannerOptions options;
  options.memory_budget_bytes = 20'000;
  options.block_size = 4;
  options.max_num_seqs = 10;  // 30,720 bytes of slots
  absl::StatusOr<CacheLayout> layout = PlanMemory(SmallHybrid(), options);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(layout.status().message()), HasSubstr("32,768 bytes"));
  EXPECT_THAT(std::string(layout.status().message()), HasSubstr("max_num_seqs 10"));
  EXPECT_THAT(std::string(layout.status().message()), HasSubstr("20,000 bytes"));
}

// A default max_num_seqs (fit_max_num_seqs) shrinks to the slots a quarter of the budget
// holds; a given one that does not fit stays an error; one that fits is kept.
TEST(MemoryPlannerTest, DefaultMaxNumSeqsFitsAQuarterOfTheBudget) {
  PlannerOptions options;
  options.memory_budget_bytes = 200'000;
  options.block_size = 4;
  options.max_num_seqs = 64;  // 196,608 bytes of slots (3,072 each)
  options.fit_max_num_seqs = true;
  absl::StatusOr<CacheLayout> layout = PlanMemory(SmallHybrid(), options);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int64_t slack = (2 + 2 * 3) * kRegionAlignmentBytes;
  EXPECT_EQ(layout->num_slots, (200'000 - slack) / 4 / 3'072);  // 16
  EXPECT_GT(layout->num_blocks, 0);
  EXPECT_LE(layout->TotalBytes(), options.memory_budget_bytes);

  options.max_num_seqs = 8;  // fits: kept
  layout = PlanMemory(SmallHybrid(), options);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->num_slots, 8);

  options.max_num_seqs = 64;  // given by the user: an error, as before
  options.fit_max_num_seqs = false;
  layout = PlanMemory(SmallHybrid(), options);
  EXPECT_FALSE(layout.ok());

  options.memory_budget_bytes = 4'000;  // not even one slot in a quarter: one, if it fits
  options.fit_max_num_seqs = true;
  layout = PlanMemory(SmallHybrid(), options);
  ASSERT_FALSE(layout.ok());  // a 3,072-byte slot and the slack do not fit in 4,000
  EXPECT_THAT(std::string(layout.status().message()), HasSubstr("max_num_seqs 1 x"));
}

TEST(MemoryPlannerTest, NoRoomForOneBlockIsAnError) {
  PlannerOptions options;
  options.memory_budget_bytes = 2048 + 30720 + 9215;  // one byte short of a block
  options.block_size = 4;
  options.max_num_seqs = 10;
  options.checkpoint_fraction = 0.0;
  absl::StatusOr<CacheLayout> layout = PlanMemory(SmallHybrid(), options);
  ASSERT_FALSE(layout.ok());
  EXPECT_THAT(std::string(layout.status().message()), HasSubstr("single latent block"));
  options.memory_budget_bytes += 1;
  layout = PlanMemory(SmallHybrid(), options);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->num_blocks, 1);
  EXPECT_EQ(layout->num_checkpoints, 0);
}

TEST(MemoryPlannerTest, MinNumTokensIsEnforced) {
  PlannerOptions options;
  options.memory_budget_bytes = 1'000'000;
  options.block_size = 4;
  options.max_num_seqs = 10;
  options.min_num_tokens = 377;  // 376 fit (see SmallHybridArithmetic)
  EXPECT_FALSE(PlanMemory(SmallHybrid(), options).ok());
  options.min_num_tokens = 376;
  EXPECT_TRUE(PlanMemory(SmallHybrid(), options).ok());
}

TEST(MemoryPlannerTest, MlaOnlyModelHasSlotsButNoStateOrCheckpoints) {
  ModelCacheSpec spec;
  spec.num_mla_layers = 3;
  PlannerOptions options;
  options.memory_budget_bytes = 10'000'000;
  options.block_size = 64;
  options.max_num_seqs = 4;
  absl::StatusOr<CacheLayout> layout = PlanMemory(spec, options);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // usable = 10,000,000 - 768; block = 3 * 64 * 1,152 = 221,184 -> 45 blocks.
  EXPECT_EQ(layout->num_blocks, 45);
  EXPECT_EQ(layout->num_slots, 4);
  EXPECT_EQ(layout->num_checkpoints, 0);
}

TEST(MemoryPlannerTest, KdaOnlyModelHasNoBlocks) {
  ModelCacheSpec spec = SmallHybrid();
  spec.num_mla_layers = 0;
  PlannerOptions options;
  options.memory_budget_bytes = 100'000;
  options.max_num_seqs = 2;
  options.checkpoint_fraction = 0.5;
  absl::StatusOr<CacheLayout> layout = PlanMemory(spec, options);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // usable = 100,000 - 1,536 = 98,464; rest = 98,464 - 6,144 = 92,320; 46,160 / 3,072 = 15.
  EXPECT_EQ(layout->num_blocks, 0);
  EXPECT_EQ(layout->num_checkpoints, 15);
}

TEST(MemoryPlannerTest, RejectsBadOptions) {
  PlannerOptions options;
  options.memory_budget_bytes = 1'000'000;
  options.checkpoint_fraction = 1.0;
  EXPECT_FALSE(PlanMemory(SmallHybrid(), options).ok());
  options.checkpoint_fraction = 0.1;
  options.max_num_seqs = 0;
  EXPECT_FALSE(PlanMemory(SmallHybrid(), options).ok());
  options.max_num_seqs = 1;
  options.memory_budget_bytes = 0;
  EXPECT_FALSE(PlanMemory(SmallHybrid(), options).ok());
}

TEST(MemoryPlannerTest, DescribePlanIsOneLineWithSeparators) {
  CacheLayout layout;
  layout.num_mla_layers = 24;
  layout.block_size = 64;
  layout.num_blocks = 19290;
  layout.num_kda_layers = 69;
  layout.kda_state_bytes_per_layer = KdaStateBytes(96, 128, 4);
  layout.kda_conv_bytes_per_layer = KdaConvBytes(96, 128, 4, 2);
  layout.num_slots = 96;
  layout.num_checkpoints = 12;
  // 1,234,560 / 1,048,576 = 1.18; 449,372,160 B = 428.55 MiB; total 82,665,308,160 B.
  EXPECT_EQ(
      DescribePlan(layout),
      "latent cache: 1,234,560 tokens (1.2 1M-token sequences) in 19,290 bf16 blocks of "
      "64; 96 state slots (428.55 MiB each); 12 KDA checkpoints (+ idle state slots); 76.99 GiB");
}

TEST(MemoryPlannerTest, DescribePlanWithoutKdaOrMla) {
  CacheLayout mla_only;
  mla_only.num_mla_layers = 1;
  mla_only.block_size = 64;
  mla_only.num_blocks = 1024;  // 65,536 tokens = 0.0625 of 1M; 75,497,472 B = 72.00 MiB
  mla_only.num_slots = 8;
  EXPECT_EQ(DescribePlan(mla_only),
            "latent cache: 65,536 tokens (0.0625 1M-token sequences) in 1,024 bf16 blocks of 64; "
            "no KDA state (8 sequences); 72.00 MiB");
  CacheLayout kda_only;
  kda_only.num_kda_layers = 1;
  kda_only.kda_state_bytes_per_layer = 1024;
  kda_only.num_slots = 2;
  kda_only.num_checkpoints = 1;
  EXPECT_EQ(DescribePlan(kda_only),
            "latent cache: none (no MLA layers); 2 state slots (1.00 KiB each); "
            "1 KDA checkpoints (+ idle state slots); 3.00 KiB");
}

TEST(MemoryPlannerTest, FormatHelpers) {
  EXPECT_EQ(FormatWithThousands(0), "0");
  EXPECT_EQ(FormatWithThousands(999), "999");
  EXPECT_EQ(FormatWithThousands(1000), "1,000");
  EXPECT_EQ(FormatWithThousands(1234567), "1,234,567");
  EXPECT_EQ(FormatWithThousands(-1234), "-1,234");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 40), "3.00 TiB");
}

}  // namespace
}  // namespace strata::kvcache
