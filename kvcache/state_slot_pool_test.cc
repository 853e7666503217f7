#include "kvcache/state_slot_pool.h"

#include "gtest/gtest.h"

namespace strata::kvcache {
namespace {

TEST(StateSlotPoolTest, HandsOutLowestIdsFirstAndRunsOut) {
  StateSlotPool pool(3);
  EXPECT_EQ(pool.Allocate(), std::optional<SlotId>(0));
  EXPECT_EQ(pool.Allocate(), std::optional<SlotId>(1));
  EXPECT_EQ(pool.Allocate(), std::optional<SlotId>(2));
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(StateSlotPoolTest, MostRecentlyFreedSlotIsReusedFirst) {
  StateSlotPool pool(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Allocate().has_value());
  pool.Free(1);
  pool.Free(3);
  EXPECT_FALSE(pool.is_allocated(3));
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.5);
  EXPECT_EQ(pool.Allocate(), std::optional<SlotId>(3));
  EXPECT_EQ(pool.Allocate(), std::optional<SlotId>(1));
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(StateSlotPoolTest, EmptyPoolHasNoSlots) {
  StateSlotPool pool(0);
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
}

TEST(StateSlotPoolDeathTest, DoubleFreeCrashes) {
  StateSlotPool pool(2);
  SlotId slot = *pool.Allocate();
  pool.Free(slot);
  EXPECT_DEATH(pool.Free(slot), "double free");
}

}  // namespace
}  // namespace strata::kvcache
