#include "kvcache/prefix_cache.h"

#include <vector>

#include "gtest/gtest.h"
#include "kvcache/block_hash.h"

namespace strata::kvcache {
namespace {

using Blocks = std::vector<BlockId>;
constexpr int kBlockSize = 4;

std::vector<int32_t> Tokens(int n, int32_t first) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) tokens[i] = first + i;
  return tokens;
}

// Plays a sequence that has computed all of `tokens`: allocates its blocks, caches the full
// ones and saves a checkpoint at every boundary in `checkpoint_at` (token counts). Returns the
// block table (still held).
Blocks Compute(BlockPool& pool, PrefixCache& cache, const std::vector<int32_t>& tokens,
               const std::vector<int64_t>& checkpoint_at) {
  std::vector<BlockHash> hashes = HashFullBlocks(tokens, kBlockSize, 0);
  Blocks table =
      pool.Allocate(NumBlocksFor(static_cast<int64_t>(tokens.size()), kBlockSize)).value();
  for (size_t i = 0; i < hashes.size(); ++i) pool.CacheFullBlock(table[i], hashes[i]);
  for (int64_t boundary : checkpoint_at) {
    std::optional<CheckpointId> id = cache.ReserveCheckpoint(hashes[boundary / kBlockSize - 1]);
    EXPECT_TRUE(id.has_value()) << boundary;
    if (id) {
      EXPECT_TRUE(cache.CommitCheckpoint(*id));
    }
  }
  return table;
}

// Allocates one block per hash and caches each under its hash (a chain of full blocks, held).
Blocks CacheChain(BlockPool& pool, const std::vector<BlockHash>& hashes) {
  Blocks table = pool.Allocate(static_cast<int32_t>(hashes.size())).value();
  for (size_t i = 0; i < hashes.size(); ++i) pool.CacheFullBlock(table[i], hashes[i]);
  return table;
}

TEST(PrefixCacheTest, CheckpointsAtEveryNBlocksAndAtThePromptEnd) {
  BlockPool pool(8);
  PrefixCache cache(&pool, 4, /*checkpoint_every_n_blocks=*/2, kBlockSize);
  const int64_t prompt_len = 14;  // its last block boundary is 12
  EXPECT_FALSE(cache.ShouldCheckpoint(0, prompt_len));
  EXPECT_FALSE(cache.ShouldCheckpoint(4, prompt_len));
  EXPECT_FALSE(cache.ShouldCheckpoint(6, prompt_len));   // not a block boundary
  EXPECT_TRUE(cache.ShouldCheckpoint(8, prompt_len));    // 2 blocks
  EXPECT_TRUE(cache.ShouldCheckpoint(12, prompt_len));   // end of the prompt
  EXPECT_FALSE(cache.ShouldCheckpoint(14, prompt_len));  // the prompt end itself is unaligned
  EXPECT_TRUE(cache.ShouldCheckpoint(16, prompt_len));   // 4 blocks (decode phase)
  EXPECT_FALSE(cache.ShouldCheckpoint(20, prompt_len));
  EXPECT_TRUE(cache.ShouldCheckpoint(24, prompt_len));
  EXPECT_EQ(cache.CheckpointBoundaries(0, 30, prompt_len), (std::vector<int64_t>{8, 12, 16, 24}));
  EXPECT_EQ(cache.CheckpointBoundaries(8, 16, prompt_len), (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(cache.CheckpointBoundaries(12, 15, prompt_len), (std::vector<int64_t>{}));
  EXPECT_EQ(cache.CheckpointBoundaries(0, 3, 3), (std::vector<int64_t>{}));  // prompt < block
}

TEST(PrefixCacheTest, EveryNZeroCheckpointsOnlyPromptEnds) {
  BlockPool pool(8);
  PrefixCache cache(&pool, 4, /*checkpoint_every_n_blocks=*/0, kBlockSize);
  EXPECT_EQ(cache.CheckpointBoundaries(0, 40, 17), (std::vector<int64_t>{16}));
  EXPECT_FALSE(cache.ShouldCheckpoint(8, 17));
  EXPECT_TRUE(cache.ShouldCheckpoint(16, 17));
}

// A block-aligned prompt also gets the boundary before its last token: the same prompt again
// (n > 1 choices, a repeated request) can match at most up to there.
TEST(PrefixCacheTest, BlockAlignedPromptsAlsoCheckpointBeforeTheirLastToken) {
  BlockPool pool(8);
  PrefixCache cache(&pool, 4, /*checkpoint_every_n_blocks=*/0, kBlockSize);
  EXPECT_EQ(cache.CheckpointBoundaries(0, 40, 16), (std::vector<int64_t>{12, 16}));
  EXPECT_TRUE(cache.ShouldCheckpoint(12, 16));
  EXPECT_TRUE(cache.ShouldCheckpoint(16, 16));
  EXPECT_FALSE(cache.ShouldCheckpoint(8, 16));
  EXPECT_EQ(cache.CheckpointBoundaries(0, 40, 4), (std::vector<int64_t>{4}));  // 0 is no point
}

TEST(PrefixCacheTest, NoCheckpointsWithoutBudgetOrWithoutKda) {
  BlockPool pool(8);
  PrefixCache no_budget(&pool, 0, 1, kBlockSize);
  EXPECT_FALSE(no_budget.ShouldCheckpoint(4, 8));
  EXPECT_FALSE(no_budget.ReserveCheckpoint(123).has_value());
  EXPECT_TRUE(no_budget.CheckpointBoundaries(0, 16, 16).empty());
}

TEST(PrefixCacheTest, HitNeedsACheckpointAtExactlyTheBoundary) {
  BlockPool pool(8);
  PrefixCache cache(&pool, 4, 2, kBlockSize);
  std::vector<int32_t> tokens = Tokens(12, 100);  // 3 full blocks
  Blocks table = Compute(pool, cache, tokens, {8});
  std::vector<BlockHash> hashes = HashFullBlocks(tokens, kBlockSize, 0);

  PrefixMatch match = cache.Lookup(hashes);
  EXPECT_EQ(match.blocks, (Blocks{table[0], table[1]}));
  EXPECT_EQ(match.num_tokens, 8);
  EXPECT_EQ(match.checkpoint, cache.FindCheckpoint(hashes[1]).value());
  EXPECT_EQ(match.num_chain_tokens, 12);  // block 2 is cached too, with no checkpoint after it
  // One block only: no checkpoint at 4 tokens, so no hit (but a chain of one cached block).
  EXPECT_EQ(cache.Lookup({hashes[0]}).num_tokens, 0);
  EXPECT_EQ(cache.Lookup({hashes[0]}).num_chain_tokens, 4);
  // A different salt misses entirely.
  EXPECT_EQ(cache.Lookup(HashFullBlocks(tokens, kBlockSize, 9)).num_chain_tokens, 0);
}

TEST(PrefixCacheTest, WithoutKdaEveryCachedBlockOfTheChainHits) {
  BlockPool pool(8);
  PrefixCache cache(&pool, 0, 0, kBlockSize, /*needs_checkpoints=*/false);
  std::vector<int32_t> tokens = Tokens(13, 5);
  Blocks table = Compute(pool, cache, tokens, {});
  pool.Free(table);
  PrefixMatch match = cache.Lookup(HashFullBlocks(tokens, kBlockSize, 0));
  EXPECT_EQ(match.blocks, (Blocks{table[0], table[1], table[2]}));
  EXPECT_EQ(match.num_tokens, 12);
  EXPECT_EQ(match.checkpoint, -1);
}

TEST(PrefixCacheTest, AcquireTouchesTheBlocksAndRefreshesTheCheckpoint) {
  BlockPool pool(6);
  PrefixCache cache(&pool, 2, 1, kBlockSize);
  std::vector<int32_t> a = Tokens(4, 0), b = Tokens(4, 50);
  Blocks table_a = Compute(pool, cache, a, {4});  // checkpoint 0
  Blocks table_b = Compute(pool, cache, b, {4});  // checkpoint 1
  pool.Free(table_a);
  pool.Free(table_b);
  PrefixMatch hit = cache.Lookup(HashFullBlocks(a, kBlockSize, 0));
  ASSERT_EQ(hit.checkpoint, 0);
  int32_t free_before = pool.num_free();
  cache.Acquire(hit);
  EXPECT_EQ(pool.ref_count(table_a[0]), 1);
  EXPECT_EQ(pool.num_free(), free_before - 1);
  // Checkpoint 0 is now the most recently used, so a new one evicts checkpoint 1 (b's).
  std::vector<int32_t> c = Tokens(4, 90);
  Blocks table_c = Compute(pool, cache, c, {4});
  EXPECT_EQ(cache.FindCheckpoint(HashFullBlocks(c, kBlockSize, 0)[0]), std::optional<int>(1));
  EXPECT_FALSE(cache.FindCheckpoint(HashFullBlocks(b, kBlockSize, 0)[0]).has_value());
  EXPECT_EQ(cache.stats().num_checkpoints_evicted, 1);
  EXPECT_EQ(cache.num_checkpoints(), 2);
  EXPECT_TRUE(cache.CheckInvariants().ok());
}

TEST(PrefixCacheTest, CheckpointLruEvictsLeastRecentlyCommittedFirst) {
  BlockPool pool(8);
  PrefixCache cache(&pool, 2, 1, kBlockSize);
  std::vector<BlockHash> h = HashFullBlocks(Tokens(12, 0), kBlockSize, 0);
  CacheChain(pool, h);
  CheckpointId c0 = cache.ReserveCheckpoint(h[0]).value();
  CheckpointId c1 = cache.ReserveCheckpoint(h[1]).value();
  EXPECT_EQ(c0, 0);
  EXPECT_EQ(c1, 1);
  ASSERT_TRUE(cache.CommitCheckpoint(c1));  // committed first: least recently used
  ASSERT_TRUE(cache.CommitCheckpoint(c0));
  CheckpointId c2 = cache.ReserveCheckpoint(h[2]).value();
  EXPECT_EQ(c2, c1);
  EXPECT_FALSE(cache.FindCheckpoint(h[1]).has_value());
  EXPECT_EQ(cache.FindCheckpoint(h[0]), std::optional<CheckpointId>(c0));
}

// A demoted checkpoint is the next one evicted, even when it was committed last; one that is
// not committed (unknown hash, or pending) is left alone.
TEST(PrefixCacheTest, DemotedCheckpointIsEvictedFirst) {
  BlockPool pool(8);
  PrefixCache cache(&pool, 2, 1, kBlockSize);
  std::vector<BlockHash> h = HashFullBlocks(Tokens(16, 0), kBlockSize, 0);
  CacheChain(pool, h);
  CheckpointId c0 = cache.ReserveCheckpoint(h[0]).value();
  CheckpointId c1 = cache.ReserveCheckpoint(h[1]).value();
  cache.Demote(h[1]);  // pending: no effect
  ASSERT_TRUE(cache.CommitCheckpoint(c0));
  ASSERT_TRUE(cache.CommitCheckpoint(c1));
  cache.Demote(h[1]);  // committed last, now first to go
  cache.Demote(h[3]);  // no checkpoint there
  EXPECT_EQ(cache.ReserveCheckpoint(h[2]).value(), c1);
  EXPECT_FALSE(cache.FindCheckpoint(h[1]).has_value());
  EXPECT_EQ(cache.FindCheckpoint(h[0]), std::optional<CheckpointId>(c0));
  EXPECT_TRUE(cache.CheckInvariants().ok());
}

// Promote undoes a Demote (the checkpoint goes to the hot end); Drop frees a committed
// checkpoint's slot for the next reservation, evicting nothing.
TEST(PrefixCacheTest, PromotedCheckpointIsEvictedLastAndDroppedOneFreesItsSlot) {
  BlockPool pool(8);
  PrefixCache cache(&pool, 2, 1, kBlockSize);
  std::vector<BlockHash> h = HashFullBlocks(Tokens(16, 0), kBlockSize, 0);
  CacheChain(pool, h);
  CheckpointId c0 = cache.ReserveCheckpoint(h[0]).value();
  ASSERT_TRUE(cache.CommitCheckpoint(c0));
  CheckpointId c1 = cache.ReserveCheckpoint(h[1]).value();
  ASSERT_TRUE(cache.CommitCheckpoint(c1));
  cache.Promote(h[0]);  // c1 is now the least recently used
  EXPECT_EQ(cache.ReserveCheckpoint(h[2]).value(), c1);
  EXPECT_EQ(cache.FindCheckpoint(h[0]), std::optional<CheckpointId>(c0));
  EXPECT_EQ(cache.stats().num_checkpoints_evicted, 1);

  cache.Drop(h[2]);  // pending: no effect
  ASSERT_TRUE(cache.CommitCheckpoint(c1));
  cache.Drop(h[0]);
  EXPECT_FALSE(cache.FindCheckpoint(h[0]).has_value());
  EXPECT_EQ(cache.num_free_checkpoint_slots(), 1);
  EXPECT_EQ(cache.ReserveCheckpoint(h[3]).value(), c0);
  EXPECT_EQ(cache.FindCheckpoint(h[2]), std::optional<CheckpointId>(c1));
  EXPECT_EQ(cache.stats().num_checkpoints_evicted, 1);
  EXPECT_TRUE(cache.CheckInvariants().ok());
}

// With a lender, checkpoints borrow free live slots once their own are full (ids past the own
// ones), give them back on eviction, and ReturnLentSlot frees the least recently used lent one
// that is neither kept nor acquired this step.
TEST(PrefixCacheTest, CheckpointsBorrowFreeLiveSlotsAndGiveThemBack) {
  BlockPool pool(8);
  StateSlotPool slots(2);
  PrefixCache cache(&pool, 1, 1, kBlockSize, /*needs_checkpoints=*/true, &slots);
  EXPECT_EQ(cache.num_checkpoint_ids(), 3);
  std::vector<BlockHash> h = HashFullBlocks(Tokens(16, 0), kBlockSize, 0);
  CacheChain(pool, h);
  std::vector<CheckpointId> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(cache.ReserveCheckpoint(h[i]).value());
    ASSERT_TRUE(cache.CommitCheckpoint(ids.back()));
  }
  EXPECT_EQ(ids[0], 0);  // the own slot
  EXPECT_GE(ids[1], 1);  // then live slots: id 1 + slot
  EXPECT_EQ(slots.num_free(), 0);
  EXPECT_EQ(cache.num_lent_slots(), 2);
  EXPECT_EQ(cache.stats().num_checkpoints_evicted, 0);
  EXPECT_TRUE(cache.CheckInvariants().ok()) << cache.CheckInvariants();

  // Acquired this step: kept; so is `keep`; the other lent one goes back.
  PrefixMatch hit = cache.Lookup({h[0], h[1]});
  ASSERT_EQ(hit.checkpoint, ids[1]);
  cache.Acquire(hit);
  EXPECT_TRUE(cache.ReturnLentSlot(/*keep=*/-1));
  EXPECT_FALSE(cache.FindCheckpoint(h[2]).has_value());
  EXPECT_EQ(slots.num_free(), 1);
  EXPECT_FALSE(cache.ReturnLentSlot(/*keep=*/-1));  // ids[1] was acquired this step
  cache.BeginStep();
  EXPECT_FALSE(cache.ReturnLentSlot(/*keep=*/ids[1]));
  EXPECT_TRUE(cache.ReturnLentSlot(/*keep=*/-1));
  EXPECT_EQ(slots.num_free(), 2);
  EXPECT_EQ(cache.num_lent_slots(), 0);
  EXPECT_TRUE(cache.CheckInvariants().ok()) << cache.CheckInvariants();
}

// evict_warm = false (a running sequence's checkpoint past its prompt) evicts only a
// checkpoint Demoted and not used since.
TEST(PrefixCacheTest, ReservingWithoutEvictingWarmTakesOnlyColdCheckpoints) {
  BlockPool pool(8);
  PrefixCache cache(&pool, 1, 1, kBlockSize);
  std::vector<BlockHash> h = HashFullBlocks(Tokens(12, 0), kBlockSize, 0);
  CacheChain(pool, h);
  ASSERT_TRUE(cache.CommitCheckpoint(cache.ReserveCheckpoint(h[0]).value()));
  EXPECT_FALSE(cache.ReserveCheckpoint(h[1], /*evict_warm=*/false).has_value());
  cache.Demote(h[0]);
  const std::optional<CheckpointId> id = cache.ReserveCheckpoint(h[1], /*evict_warm=*/false);
  ASSERT_TRUE(id.has_value());
  ASSERT_TRUE(cache.CommitCheckpoint(*id));  // committed: warm again
  EXPECT_FALSE(cache.ReserveCheckpoint(h[2], /*evict_warm=*/false).has_value());
  EXPECT_TRUE(cache.ReserveCheckpoint(h[2]).has_value());
}

TEST(PrefixCacheTest, PromptEndsAreTheLastBoundaryAndTheOneBeforeTheLastToken) {
  BlockPool pool(8);
  PrefixCache cache(&pool, 2, 1, kBlockSize);  // blocks of 4
  EXPECT_TRUE(cache.IsPromptEnd(12, 14));
  EXPECT_FALSE(cache.IsPromptEnd(8, 14));
  EXPECT_TRUE(cache.IsPromptEnd(16, 16));
  EXPECT_TRUE(cache.IsPromptEnd(12, 16));
  EXPECT_FALSE(cache.IsPromptEnd(0, 3));
}

TEST(PrefixCacheTest, PendingCheckpointIsInvisibleAndPinned) {
  BlockPool pool(4);
  PrefixCache cache(&pool, 1, 1, kBlockSize);
  std::vector<int32_t> tokens = Tokens(8, 0);
  std::vector<BlockHash> h = HashFullBlocks(tokens, kBlockSize, 0);
  Blocks table = pool.Allocate(2).value();
  pool.CacheFullBlock(table[0], h[0]);
  pool.CacheFullBlock(table[1], h[1]);
  CheckpointId pending = cache.ReserveCheckpoint(h[0]).value();
  EXPECT_EQ(cache.num_pending_checkpoints(), 1);
  EXPECT_EQ(cache.Lookup(h).num_tokens, 0);                 // not written yet
  EXPECT_FALSE(cache.ReserveCheckpoint(h[0]).has_value());  // already present
  EXPECT_FALSE(cache.ReserveCheckpoint(h[1]).has_value());  // the only slot is pending
  cache.CancelCheckpoint(pending);
  EXPECT_EQ(cache.num_pending_checkpoints(), 0);
  EXPECT_EQ(cache.num_free_checkpoint_slots(), 1);
  CheckpointId again = cache.ReserveCheckpoint(h[1]).value();
  ASSERT_TRUE(cache.CommitCheckpoint(again));
  EXPECT_EQ(cache.Lookup(h).num_tokens, 8);
  EXPECT_TRUE(cache.CheckInvariants().ok());
}

TEST(PrefixCacheTest, CommitWithoutCachedBoundaryBlockDropsTheCheckpoint) {
  BlockPool pool(4);
  PrefixCache cache(&pool, 2, 1, kBlockSize);
  CheckpointId id = cache.ReserveCheckpoint(0xabc).value();
  EXPECT_FALSE(cache.CommitCheckpoint(id));
  EXPECT_EQ(cache.num_checkpoints(), 0);
  EXPECT_EQ(cache.num_free_checkpoint_slots(), 2);
  EXPECT_EQ(cache.stats().num_checkpoints_invalidated, 1);
}

TEST(PrefixCacheTest, EvictingTheBoundaryBlockDropsItsCheckpoint) {
  BlockPool pool(3);
  PrefixCache cache(&pool, 2, 1, kBlockSize);
  std::vector<int32_t> tokens = Tokens(8, 0);
  Blocks table = Compute(pool, cache, tokens, {4, 8});
  EXPECT_EQ(cache.num_checkpoints(), 2);
  pool.Free(table);          // queue [2, 1, 0]: block 2 uncached at the front, then 1 (tail), 0
  pool.Allocate(2).value();  // takes 2, evicts block 1 (boundary of the 8-token checkpoint)
  EXPECT_EQ(cache.num_checkpoints(), 1);
  EXPECT_EQ(cache.stats().num_checkpoints_invalidated, 1);
  std::vector<BlockHash> h = HashFullBlocks(tokens, kBlockSize, 0);
  EXPECT_FALSE(cache.FindCheckpoint(h[1]).has_value());
  PrefixMatch match = cache.Lookup(h);
  EXPECT_EQ(match.num_tokens, 4);
  EXPECT_TRUE(cache.CheckInvariants().ok());
}

TEST(PrefixCacheTest, CheckpointBehindAnEvictedBlockIsUnreachable) {
  BlockPool pool(3);
  PrefixCache cache(&pool, 2, 2, kBlockSize);
  std::vector<int32_t> tokens = Tokens(8, 0);
  std::vector<BlockHash> h = HashFullBlocks(tokens, kBlockSize, 0);
  Blocks table = Compute(pool, cache, tokens, {8});  // checkpoint at block 1 only
  pool.Free(table);                                  // queue [2, 1, 0]
  pool.Touch({table[1]});                            // keep the boundary block held
  pool.Allocate(2).value();                          // takes 2 and evicts block 0 (h[0])
  ASSERT_FALSE(pool.FindCached(h[0]).has_value());
  EXPECT_TRUE(cache.FindCheckpoint(h[1]).has_value());  // still stored...
  EXPECT_EQ(cache.Lookup(h).num_tokens, 0);             // ...but never a hit
}

TEST(PrefixCacheTest, StatisticsCountQueriesAndHits) {
  BlockPool pool(4);
  PrefixCache cache(&pool, 2, 1, kBlockSize);
  std::vector<int32_t> tokens = Tokens(8, 0);
  Blocks table = Compute(pool, cache, tokens, {4});
  std::vector<BlockHash> h = HashFullBlocks(tokens, kBlockSize, 0);
  cache.Lookup(h);                                    // 8 tokens asked, 4 hit
  cache.Lookup({HashBlock(0, tokens.data(), 2, 5)});  // 4 asked, miss
  EXPECT_EQ(cache.num_queries(), 2);
  EXPECT_EQ(cache.num_hits(), 1);
  EXPECT_EQ(cache.stats().num_query_tokens, 12);
  EXPECT_EQ(cache.stats().num_hit_tokens, 4);
  EXPECT_DOUBLE_EQ(cache.hit_rate(), 4.0 / 12.0);
}

TEST(PrefixCacheTest, DestructionUnhooksTheEvictionCallback) {
  BlockPool pool(2);
  {
    PrefixCache cache(&pool, 1, 1, kBlockSize);
    Blocks table = Compute(pool, cache, Tokens(4, 0), {4});
    pool.Free(table);
  }
  EXPECT_EQ(pool.Allocate(2).value().size(), 2u);  // evicts with no dangling callback
}

}  // namespace
}  // namespace strata::kvcache
