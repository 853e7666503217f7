#include "scheduler/scheduler_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"

namespace strata::scheduler {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

SchedulerConfig ValidConfig() {
  SchedulerConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 16;
  c.max_model_len = 32;
  c.block_size = 4;
  c.num_blocks = 8;
  c.num_slots = 4;
  c.num_checkpoint_slots = 2;
  c.checkpoint_every_n_blocks = 2;
  return c;
}

std::string ErrorOf(const SchedulerConfig& c) {
  absl::Status s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(SchedulerConfigTest, ValidConfigPasses) { EXPECT_TRUE(ValidConfig().Validate().ok()); }

TEST(SchedulerConfigTest, RejectsNonPositiveSizes) {
  SchedulerConfig c = ValidConfig();
  c.max_num_seqs = 0;
  EXPECT_THAT(ErrorOf(c), HasSubstr("max_num_seqs must be > 0, got 0"));
  c = ValidConfig();
  c.block_size = -4;
  EXPECT_THAT(ErrorOf(c), HasSubstr("block_size must be > 0, got -4"));
  c = ValidConfig();
  c.max_model_len = 0;
  EXPECT_THAT(ErrorOf(c), HasSubstr("max_model_len"));
  c = ValidConfig();
  c.num_checkpoint_slots = -1;
  EXPECT_THAT(ErrorOf(c), HasSubstr("num_checkpoint_slots must be >= 0"));
  c = ValidConfig();
  c.long_prefill_token_threshold = -2;
  EXPECT_THAT(ErrorOf(c), HasSubstr("long_prefill_token_threshold"));
}

TEST(SchedulerConfigTest, KdaModelNeedsSlots) {
  SchedulerConfig c = ValidConfig();
  c.num_slots = 0;
  EXPECT_THAT(ErrorOf(c), HasSubstr("num_slots must be > 0"));
  c.has_kda_layers = false;
  EXPECT_TRUE(c.Validate().ok());
}

TEST(SchedulerConfigTest, BudgetMustCoverOneDecodePerRunningSequence) {
  SchedulerConfig c = ValidConfig();
  c.max_num_batched_tokens = 3;
  EXPECT_THAT(ErrorOf(c),
              AllOf(HasSubstr("max_num_batched_tokens (3)"), HasSubstr("max_num_seqs (4)")));
}

TEST(SchedulerConfigTest, PoolMustHoldOneFullLengthSequence) {
  SchedulerConfig c = ValidConfig();
  c.max_model_len = 33;  // 8 blocks of 4 hold 32 tokens
  EXPECT_THAT(ErrorOf(c), AllOf(HasSubstr("= 32 tokens"), HasSubstr("max_model_len (33)")));
}

TEST(SchedulerConfigTest, CreateReturnsTheValidationError) {
  SchedulerConfig c = ValidConfig();
  c.num_blocks = 0;
  absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(c);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Scheduler::Create(ValidConfig()).ok());
  EXPECT_DEATH(Scheduler scheduler(c), "num_blocks must be > 0");
}

TEST(SchedulerConfigTest, PolicyNames) {
  EXPECT_STREQ(PolicyName(Policy::kFcfs), "fcfs");
  EXPECT_STREQ(PolicyName(Policy::kPriority), "priority");
}

}  // namespace
}  // namespace strata::scheduler
