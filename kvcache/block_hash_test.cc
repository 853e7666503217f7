#include "kvcache/block_hash.h"

#include <vector>

#include "gtest/gtest.h"

namespace strata::kvcache {
namespace {

// Golden values from an independent Python implementation of the formula documented in
// block_hash.h (arbitrary-precision integers masked to 64 bits).
TEST(BlockHashTest, MatchesDocumentedFormula) {
  EXPECT_EQ(HashBlock(kRootHash, nullptr, 0, 0), 0x238275bc38fcbe91ull);
  std::vector<int32_t> four = {1, 2, 3, 4};
  EXPECT_EQ(HashBlock(kRootHash, four.data(), 4, 0), 0x1523729e0782f529ull);
  std::vector<int32_t> odd = {1, 2, 3};
  EXPECT_EQ(HashBlock(kRootHash, odd.data(), 3, 7), 0xfcd6d9f804025ed0ull);
  std::vector<int32_t> negative = {-1, 163584, 5};
  EXPECT_EQ(HashBlock(0x123456789abcdef0ull, negative.data(), 3, 0), 0xcd9790c380efcb45ull);
}

TEST(BlockHashTest, FullBlocksAreChainedThroughTheParent) {
  std::vector<int32_t> tokens = {10, 11, 12, 13, 14, 15, 16, 17, 18};  // 2 full blocks + 1
  std::vector<BlockHash> hashes = HashFullBlocks(tokens, 4, 0);
  ASSERT_EQ(hashes.size(), 2u);
  EXPECT_EQ(hashes[0], 0x12c5378b59438cf4ull);
  EXPECT_EQ(hashes[1], 0x616bfa162f418e24ull);
  EXPECT_EQ(hashes[1], HashBlock(hashes[0], tokens.data() + 4, 4, 0));
}

TEST(BlockHashTest, PartialBlockIsNotHashed) {
  EXPECT_TRUE(HashFullBlocks({1, 2, 3}, 4, 0).empty());
  EXPECT_EQ(HashFullBlocks({1, 2, 3, 4, 5, 6, 7}, 4, 0).size(), 1u);
  EXPECT_EQ(HashFullBlocks({1, 2, 3, 4, 5, 6, 7, 8}, 4, 0).size(), 2u);
}

TEST(BlockHashTest, DifferentSaltGivesDifferentHashesForEveryBlock) {
  std::vector<int32_t> tokens(64);
  for (int i = 0; i < 64; ++i) tokens[i] = i * 7;
  std::vector<BlockHash> a = HashFullBlocks(tokens, 16, 1);
  std::vector<BlockHash> b = HashFullBlocks(tokens, 16, 2);
  ASSERT_EQ(a.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NE(a[i], b[i]) << i;
}

TEST(BlockHashTest, ChangingOneTokenChangesThatBlockAndAllLaterOnes) {
  std::vector<int32_t> tokens(64);
  for (int i = 0; i < 64; ++i) tokens[i] = 1000 + i;
  std::vector<BlockHash> base = HashFullBlocks(tokens, 16, 0);
  tokens[37] += 1;  // block 2
  std::vector<BlockHash> changed = HashFullBlocks(tokens, 16, 0);
  EXPECT_EQ(changed[0], base[0]);
  EXPECT_EQ(changed[1], base[1]);
  EXPECT_NE(changed[2], base[2]);
  EXPECT_NE(changed[3], base[3]);
}

TEST(BlockHashTest, TokenOrderAndLengthMatter) {
  std::vector<int32_t> ab = {1, 2}, ba = {2, 1}, a0 = {1, 0}, a = {1};
  EXPECT_NE(HashBlock(0, ab.data(), 2, 0), HashBlock(0, ba.data(), 2, 0));
  // {1} and {1, 0} pack into the same last word; the length keeps them apart.
  EXPECT_NE(HashBlock(0, a.data(), 1, 0), HashBlock(0, a0.data(), 2, 0));
}

TEST(BlockHashTest, SameBlockUnderDifferentParentsDiffers) {
  std::vector<int32_t> block = {5, 6, 7, 8};
  EXPECT_NE(HashBlock(1, block.data(), 4, 0), HashBlock(2, block.data(), 4, 0));
}

// Images: the blocks an image's rows overlap take its content key into their salt, so equal
// placeholder ids of different images never share a block; blocks before it are unaffected, and
// blocks after it differ through their parent.
TEST(BlockHashTest, MediaKeysChangeExactlyTheBlocksTheyOverlapAndEverythingAfter) {
  std::vector<int32_t> tokens(40, 9);  // 10 blocks of 4: an image at [10, 18) → blocks 2..4
  const std::vector<MediaKeySpan> a = {{10, 18, 0xaaaa}}, b = {{10, 18, 0xbbbb}};
  const std::vector<BlockHash> plain = HashFullBlocks(tokens, 4, 5);
  const std::vector<BlockHash> with_a = HashFullBlocks(tokens, 4, 5, a);
  const std::vector<BlockHash> with_b = HashFullBlocks(tokens, 4, 5, b);
  for (size_t i = 0; i < plain.size(); ++i) {
    if (i < 2) {
      EXPECT_EQ(with_a[i], plain[i]) << i;
      EXPECT_EQ(with_b[i], plain[i]) << i;
    } else {
      EXPECT_NE(with_a[i], plain[i]) << i;
      EXPECT_NE(with_a[i], with_b[i]) << i;
    }
  }
  EXPECT_EQ(BlockSalt(5, 1, 4, a), 5u);  // [4, 8): before the image
  EXPECT_NE(BlockSalt(5, 2, 4, a), 5u);  // [8, 12): its first rows
  EXPECT_NE(BlockSalt(5, 4, 4, a), 5u);  // [16, 20): its last rows
  EXPECT_EQ(BlockSalt(5, 5, 4, a), 5u);  // [20, 24): after it (the parent carries it)
  // The same image at the same place hashes the same (a prefix hit needs the same image).
  EXPECT_EQ(HashFullBlocks(tokens, 4, 5, a), with_a);
  // Two images in one block: both keys count, in order.
  const std::vector<MediaKeySpan> two = {{8, 9, 1}, {9, 10, 2}}, swapped = {{8, 9, 2}, {9, 10, 1}};
  EXPECT_NE(BlockSalt(0, 2, 4, two), BlockSalt(0, 2, 4, swapped));
}

}  // namespace
}  // namespace strata::kvcache
