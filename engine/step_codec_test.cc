// EncodeStepPlan / DecodeStepPlan: a plan survives the trip field for field, images as their
// places only (rows stay with the lead), offload copies with their bytes, and cut or bent bytes
// are InvalidArgument, never a crash or an allocation of what a count claims.
#include "engine/step_codec.h"

#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

namespace strata::engine {
namespace {

StepPlan PlanWithImages() {
  StepPlan plan;
  plan.step_id = 41;
  ScheduledSequence a;
  a.seq_id = 7;
  a.token_ids = {5, 9, 9, 9, 9, 2};
  a.num_computed_tokens = 12;
  a.block_table = {3, 8};
  a.slot = 1;
  a.slot_init = SlotInit::kFromCheckpoint;
  a.source_checkpoint = 4;
  a.save_checkpoints = {CheckpointSave{2, 64}};
  a.sample = true;
  a.num_logprobs = 2;
  a.score_targets = {9, 9};
  a.num_score_logprobs = 1;
  MediaEmbedding image;
  image.position = 13;
  image.num_rows = 4;
  image.content_key = 0xfeedfacecafebeefull;
  image.rows = std::make_shared<const std::vector<float>>(16, 0.5f);
  a.media = {image};
  image.position = 30;
  image.content_key = 3;
  a.media.push_back(image);
  ScheduledSequence b;  // no images
  b.seq_id = 8;
  b.token_ids = {1};
  plan.sequences = {a, b};
  return plan;
}

TEST(StepCodecTest, APlanWithImagesComesBackWithTheirPlacesAndNoRows) {
  const StepPlan plan = PlanWithImages();
  std::vector<uint8_t> bytes;
  EncodeStepPlan(plan, &bytes);
  absl::StatusOr<StepPlan> got = DecodeStepPlan(bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->step_id, 41);
  ASSERT_EQ(got->sequences.size(), 2u);
  const ScheduledSequence& a = got->sequences[0];
  EXPECT_EQ(a.seq_id, 7);
  EXPECT_EQ(a.token_ids, plan.sequences[0].token_ids);
  EXPECT_EQ(a.num_computed_tokens, 12);
  EXPECT_EQ(a.block_table, plan.sequences[0].block_table);
  EXPECT_EQ(a.slot_init, SlotInit::kFromCheckpoint);
  EXPECT_EQ(a.source_checkpoint, 4);
  ASSERT_EQ(a.save_checkpoints.size(), 1u);
  EXPECT_EQ(a.save_checkpoints[0].checkpoint, 2);
  EXPECT_EQ(a.save_checkpoints[0].num_tokens, 64);
  EXPECT_TRUE(a.sample);
  EXPECT_EQ(a.score_targets, plan.sequences[0].score_targets);
  ASSERT_EQ(a.media.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a.media[i].position, plan.sequences[0].media[i].position);
    EXPECT_EQ(a.media[i].num_rows, 4);
    EXPECT_EQ(a.media[i].content_key, plan.sequences[0].media[i].content_key);
    EXPECT_EQ(a.media[i].rows, nullptr);  // the lead writes the rows; the others zeros
  }
  EXPECT_TRUE(got->sequences[1].media.empty());
  // Where the follower's rows go: the same pieces as the lead's, without data.
  std::vector<EmbeddingRows> lead, follower;
  MediaRowsIn(plan.sequences[0].media, 12, 6, 4, &lead);
  MediaRowsIn(a.media, 12, 6, 4, &follower);
  ASSERT_EQ(lead.size(), 1u);
  ASSERT_EQ(follower.size(), 1u);
  EXPECT_EQ(follower[0].first, lead[0].first);
  EXPECT_EQ(follower[0].num_rows, lead[0].num_rows);
  EXPECT_NE(lead[0].rows, nullptr);
  EXPECT_EQ(follower[0].rows, nullptr);
}

// Under tensor parallelism every rank copies its share of the offloaded units: the saves and
// the loads (with the tier entry's bytes) travel in the plan.
TEST(StepCodecTest, OffloadCopiesComeBackWithTheirBytes) {
  StepPlan plan = PlanWithImages();
  plan.cache_saves = {CacheSave{CacheUnit::kBlock, 5}, CacheSave{CacheUnit::kCheckpoint, 2}};
  plan.cache_loads = {CacheLoad{CacheUnit::kSlot, 3, std::string("\0ab\xff", 4)},
                      CacheLoad{CacheUnit::kBlock, 9, std::string(1000, 'x'), true}};
  std::vector<uint8_t> bytes;
  EncodeStepPlan(plan, &bytes);
  absl::StatusOr<StepPlan> got = DecodeStepPlan(bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->cache_saves.size(), 2u);
  EXPECT_EQ(got->cache_saves[1].unit, CacheUnit::kCheckpoint);
  EXPECT_EQ(got->cache_saves[1].index, 2);
  ASSERT_EQ(got->cache_loads.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got->cache_loads[i].unit, plan.cache_loads[i].unit);
    EXPECT_EQ(got->cache_loads[i].index, plan.cache_loads[i].index);
    EXPECT_EQ(got->cache_loads[i].bytes, plan.cache_loads[i].bytes);
    EXPECT_EQ(got->cache_loads[i].beside_step, plan.cache_loads[i].beside_step);
  }
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_EQ(DecodeStepPlan({bytes.data(), cut}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "cut at " << cut;
  }
  // A unit kind past the last one, and a negative index.
  plan.cache_saves[0].unit = static_cast<CacheUnit>(7);
  EncodeStepPlan(plan, &bytes);
  EXPECT_EQ(DecodeStepPlan(bytes).status().code(), absl::StatusCode::kInvalidArgument);
  plan.cache_saves[0] = CacheSave{CacheUnit::kBlock, -1};
  EncodeStepPlan(plan, &bytes);
  EXPECT_EQ(DecodeStepPlan(bytes).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StepCodecTest, CutOrBentBytesAreInvalidArgument) {
  std::vector<uint8_t> bytes;
  EncodeStepPlan(PlanWithImages(), &bytes);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    const absl::StatusOr<StepPlan> got = DecodeStepPlan({bytes.data(), cut});
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << "cut at " << cut;
  }
  // The second sequence's image count (its last 8 bytes, before the cache save and load
  // counts) claiming 2^60 images; then each of those counts.
  const uint64_t huge = uint64_t{1} << 60;
  for (size_t from_end : {3, 2, 1}) {
    std::vector<uint8_t> bent = bytes;
    std::memcpy(bent.data() + bent.size() - from_end * sizeof(huge), &huge, sizeof(huge));
    EXPECT_EQ(DecodeStepPlan(bent).status().code(), absl::StatusCode::kInvalidArgument) << from_end;
  }
  std::vector<uint8_t> bent;
  // An image of no rows is refused too.
  StepPlan zero = PlanWithImages();
  zero.sequences[0].media[0].num_rows = 0;
  EncodeStepPlan(zero, &bent);
  EXPECT_EQ(DecodeStepPlan(bent).status().code(), absl::StatusCode::kInvalidArgument);
  bytes.push_back(0);
  EXPECT_EQ(DecodeStepPlan(bytes).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::engine
