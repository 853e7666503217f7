#include "kvcache/block_pool.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace strata::kvcache {
namespace {

using Blocks = std::vector<BlockId>;

Blocks MustAllocate(BlockPool& pool, int32_t n) {
  std::optional<Blocks> blocks = pool.Allocate(n);
  EXPECT_TRUE(blocks.has_value()) << "allocate " << n << " with " << pool.num_free() << " free";
  return blocks.value_or(Blocks{});
}

TEST(BlockPoolTest, FreshPoolAllocatesInIdOrder) {
  BlockPool pool(10);
  EXPECT_EQ(pool.num_free(), 10);
  EXPECT_EQ(MustAllocate(pool, 3), (Blocks{0, 1, 2}));
  EXPECT_EQ(MustAllocate(pool, 2), (Blocks{3, 4}));
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_EQ(pool.num_held(), 5);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.5);
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.ref_count(7), 0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, AllocateIsAllOrNothing) {
  BlockPool pool(4);
  EXPECT_FALSE(pool.Allocate(5).has_value());
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(MustAllocate(pool, 4), (Blocks{0, 1, 2, 3}));
  EXPECT_FALSE(pool.Allocate(1).has_value());
  EXPECT_EQ(MustAllocate(pool, 0), Blocks{});
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
}

TEST(BlockPoolTest, FreedUncachedBlockIsReusedFirst) {
  BlockPool pool(6);
  Blocks a = MustAllocate(pool, 2);  // {0, 1}
  Blocks b = MustAllocate(pool, 2);  // {2, 3}
  EXPECT_EQ(a, (Blocks{0, 1}));
  pool.Free(b);
  // Uncached blocks hold nothing reusable: they go to the front, in table order.
  EXPECT_EQ(MustAllocate(pool, 3), (Blocks{2, 3, 4}));
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, FreedCachedBlockIsReusedLast) {
  BlockPool pool(4);
  Blocks seq = MustAllocate(pool, 2);  // {0, 1}
  ASSERT_TRUE(pool.CacheFullBlock(0, 100));
  ASSERT_TRUE(pool.CacheFullBlock(1, 101));
  pool.Free(seq);  // tail first: queue = [2, 3, 1, 0]
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(MustAllocate(pool, 2), (Blocks{2, 3}));
  EXPECT_EQ(pool.num_evictions(), 0);
  // Next come the cached blocks, the sequence's tail (101) before its prefix (100).
  EXPECT_EQ(MustAllocate(pool, 1), (Blocks{1}));
  EXPECT_FALSE(pool.FindCached(101).has_value());
  EXPECT_FALSE(pool.is_cached(1));
  EXPECT_EQ(pool.FindCached(100), std::optional<BlockId>(0));
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_EQ(MustAllocate(pool, 1), (Blocks{0}));
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, EvictionOrderIsLeastRecentlyFreedFirst) {
  BlockPool pool(6);
  Blocks a = MustAllocate(pool, 2);  // {0, 1}
  Blocks b = MustAllocate(pool, 2);  // {2, 3}
  Blocks c = MustAllocate(pool, 2);  // {4, 5}
  for (BlockId id = 0; id < 6; ++id) ASSERT_TRUE(pool.CacheFullBlock(id, 1000 + id));
  pool.Free(a);  // queue [1, 0]
  pool.Free(b);  // queue [1, 0, 3, 2]
  pool.Free(c);  // queue [1, 0, 3, 2, 5, 4]
  // A prefix hit on a's blocks makes them the most recently used once freed again.
  pool.Touch({0, 1});  // queue [3, 2, 5, 4]
  pool.Free({0, 1});   // queue [3, 2, 5, 4, 1, 0]
  EXPECT_EQ(MustAllocate(pool, 6), (Blocks{3, 2, 5, 4, 1, 0}));
  EXPECT_EQ(pool.num_evictions(), 6);
}

TEST(BlockPoolTest, TouchRevivesACachedFreeBlockAndSharesAHeldOne) {
  BlockPool pool(4);
  Blocks seq = MustAllocate(pool, 2);  // {0, 1}
  ASSERT_TRUE(pool.CacheFullBlock(0, 7));
  pool.Free(seq);  // 1 uncached -> front; 0 cached -> back: queue [1, 2, 3, 0]
  ASSERT_EQ(pool.FindCached(7), std::optional<BlockId>(0));
  pool.Touch({0});
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.num_free(), 3);
  pool.Touch({0});  // a second sequence shares it
  EXPECT_EQ(pool.ref_count(0), 2);
  EXPECT_EQ(pool.num_free(), 3);
  pool.Free({0});
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.num_free(), 3);
  pool.Free({0});
  EXPECT_EQ(pool.ref_count(0), 0);
  EXPECT_EQ(MustAllocate(pool, 4), (Blocks{1, 2, 3, 0}));
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, HeldCachedBlockIsFoundAndNeverEvicted) {
  BlockPool pool(3);
  Blocks seq = MustAllocate(pool, 1);  // {0}
  ASSERT_EQ(seq, Blocks{0});
  ASSERT_TRUE(pool.CacheFullBlock(0, 55));
  EXPECT_EQ(MustAllocate(pool, 2), (Blocks{1, 2}));
  EXPECT_FALSE(pool.Allocate(1).has_value());
  EXPECT_EQ(pool.FindCached(55), std::optional<BlockId>(0));
}

TEST(BlockPoolTest, DuplicateHashStaysPrivate) {
  BlockPool pool(3);
  Blocks a = MustAllocate(pool, 1);  // {0}
  Blocks b = MustAllocate(pool, 1);  // {1}
  EXPECT_TRUE(pool.CacheFullBlock(0, 9));
  EXPECT_TRUE(pool.CacheFullBlock(0, 9));  // idempotent
  EXPECT_FALSE(pool.CacheFullBlock(1, 9));
  EXPECT_FALSE(pool.is_cached(1));
  EXPECT_EQ(pool.FindCached(9), std::optional<BlockId>(0));
  pool.Free(b);  // uncached: front of the queue [1, 2]
  pool.Free(a);  // cached: back [1, 2, 0]
  EXPECT_EQ(MustAllocate(pool, 3), (Blocks{1, 2, 0}));
}

TEST(BlockPoolTest, EvictionCallbackReportsBlockAndHash) {
  BlockPool pool(2);
  std::vector<std::pair<BlockId, BlockHash>> evicted;
  pool.SetEvictionCallback([&](BlockId b, BlockHash h) { evicted.emplace_back(b, h); });
  Blocks seq = MustAllocate(pool, 2);
  ASSERT_TRUE(pool.CacheFullBlock(0, 40));
  ASSERT_TRUE(pool.CacheFullBlock(1, 41));
  pool.Free(seq);  // queue [1, 0]
  MustAllocate(pool, 1);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], (std::pair<BlockId, BlockHash>(1, 41)));
}

TEST(BlockPoolTest, DropCachedFreeBlocksKeepsHeldOnes) {
  BlockPool pool(4);
  Blocks held = MustAllocate(pool, 1);   // {0}
  Blocks freed = MustAllocate(pool, 2);  // {1, 2}
  ASSERT_TRUE(pool.CacheFullBlock(0, 1));
  ASSERT_TRUE(pool.CacheFullBlock(1, 2));
  ASSERT_TRUE(pool.CacheFullBlock(2, 3));
  pool.Free(freed);
  int calls = 0;
  pool.SetEvictionCallback([&](BlockId, BlockHash) { ++calls; });
  EXPECT_EQ(pool.DropCachedFreeBlocks(), 2);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(pool.num_cached(), 1);
  EXPECT_TRUE(pool.is_cached(0));
  EXPECT_FALSE(pool.FindCached(2).has_value());
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, CountFreeCountsUnreferencedBlocks) {
  BlockPool pool(4);
  Blocks seq = MustAllocate(pool, 3);
  for (BlockId b : seq) ASSERT_TRUE(pool.CacheFullBlock(b, 10 + b));
  pool.Free({seq[1], seq[2]});
  EXPECT_EQ(pool.CountFree({0, 1, 2}), 2);
}

TEST(BlockPoolDeathTest, DoubleFreeCrashes) {
  BlockPool pool(2);
  Blocks seq = MustAllocate(pool, 1);
  pool.Free(seq);
  EXPECT_DEATH(pool.Free(seq), "double free");
}

TEST(BlockPoolDeathTest, TouchOfUncachedFreeBlockCrashes) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.Touch({1}), "uncached");
}

TEST(BlockPoolDeathTest, CachingAFreeBlockCrashes) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.CacheFullBlock(0, 3), "held");
}

}  // namespace
}  // namespace strata::kvcache
