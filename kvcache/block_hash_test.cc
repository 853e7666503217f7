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

}  // namespace
}  // namespace strata::kvcache
