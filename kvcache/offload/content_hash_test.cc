// ContentHasher: stable values, independence from how the stream is split, sensitivity.
#include "kvcache/offload/content_hash.h"

#include <string>

#include <gtest/gtest.h>

#include "kvcache/offload/offload_testing.h"

namespace strata::kvcache {
namespace {

TEST(ContentHashTest, ValuesArePinned) {
  // Written into disk tier files: a change here orphans every file (bump the format version).
  // "" and "abc" were checked against an independent implementation of the definition in
  // content_hash.h.
  EXPECT_EQ(ContentHash64(""), 0xc167331060e5d679ull);
  EXPECT_EQ(ContentHash64("abc"), 0x4fb46191c84c50a3ull);
  EXPECT_EQ(ContentHash64(testing::TestPayload(7, 1000)), 0xcfaa76846af86b58ull);
}

TEST(ContentHashTest, SplittingTheStreamAnywhereGivesTheSameHash) {
  const std::string bytes = testing::TestPayload(1, 301);
  for (size_t size : {0, 1, 7, 8, 9, 31, 32, 33, 64, 100, 301}) {
    const std::string_view whole(bytes.data(), size);
    const uint64_t expected = ContentHash64(whole);
    for (size_t cut1 = 0; cut1 <= size; cut1 += 3) {
      for (size_t cut2 = cut1; cut2 <= size; cut2 += 11) {
        ContentHasher hasher;
        hasher.Update(whole.substr(0, cut1));
        hasher.Update(whole.substr(cut1, cut2 - cut1));
        hasher.Update(whole.substr(cut2));
        ASSERT_EQ(hasher.Hash64(), expected) << size << " " << cut1 << " " << cut2;
      }
    }
  }
}

TEST(ContentHashTest, EveryByteAndTheLengthMatter) {
  const std::string bytes = testing::TestPayload(2, 200);
  const uint64_t base = ContentHash64(bytes);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string changed = bytes;
    changed[i] ^= 0x01;
    ASSERT_NE(ContentHash64(changed), base) << i;
  }
  EXPECT_NE(ContentHash64(std::string("a")), ContentHash64(std::string("a\0", 2)));
  EXPECT_NE(ContentHash64(std::string(8, '\0')), ContentHash64(std::string(16, '\0')));
}

TEST(ContentHashTest, SeedAndLengthPrefixSeparateStreams) {
  EXPECT_NE(ContentHasher(1).Hash64(), ContentHasher(2).Hash64());
  ContentHasher ab_c, a_bc;
  ab_c.UpdateString("ab");
  ab_c.UpdateString("c");
  a_bc.UpdateString("a");
  a_bc.UpdateString("bc");
  EXPECT_NE(ab_c.Hash64(), a_bc.Hash64());
}

TEST(ContentHashTest, Hash128HexIsThirtyTwoDigitsEndingInHash64) {
  ContentHasher hasher;
  hasher.Update("checkpoint");
  const std::string hex = hasher.Hash128Hex();
  ASSERT_EQ(hex.size(), 32u);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(std::stoull(hex.substr(16), nullptr, 16), hasher.Hash64());
}

}  // namespace
}  // namespace strata::kvcache
