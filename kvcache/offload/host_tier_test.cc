// HostTier: exact LRU order, the byte budget, refusal of oversized entries, stats.
#include "kvcache/offload/host_tier.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/offload/offload_testing.h"

namespace strata::kvcache {
namespace {

using ::testing::HasSubstr;
using testing::TestKey;
using testing::TestPayload;

std::vector<OffloadKey> KeysOf(const std::vector<OffloadEntry>& entries) {
  std::vector<OffloadKey> keys;
  for (const OffloadEntry& e : entries) keys.push_back(e.key);
  return keys;
}

TEST(HostTierTest, RoundTripsAndCounts) {
  HostTier tier(1000);
  ASSERT_TRUE(tier.Put(TestKey(1), TestPayload(1, 100), nullptr).ok());
  ASSERT_TRUE(tier.Put(TestKey(2, OffloadKind::kKdaCheckpoint), TestPayload(2, 50), nullptr).ok());
  EXPECT_TRUE(tier.Contains(TestKey(1)));
  EXPECT_FALSE(tier.Contains(TestKey(2)));  // other kind
  EXPECT_EQ(tier.Get(TestKey(1)), TestPayload(1, 100));
  EXPECT_EQ(tier.Get(TestKey(2, OffloadKind::kKdaCheckpoint)), TestPayload(2, 50));
  EXPECT_EQ(tier.Get(TestKey(3)), std::nullopt);
  const HostTierStats stats = tier.stats();
  EXPECT_EQ(stats.num_entries, 2);
  EXPECT_EQ(stats.bytes_used, 150);
  EXPECT_EQ(stats.capacity_bytes, 1000);
  EXPECT_EQ(stats.hits, 2);
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.bytes_in, 150);
  EXPECT_EQ(stats.bytes_out, 150);
  EXPECT_EQ(stats.evictions, 0);
}

TEST(HostTierTest, EvictsLeastRecentlyUsedFirstAndHandsThemBack) {
  HostTier tier(300);
  std::vector<OffloadEntry> evicted;
  for (int i = 1; i <= 3; ++i)
    ASSERT_TRUE(tier.Put(TestKey(i), TestPayload(i, 100), &evicted).ok());
  EXPECT_TRUE(evicted.empty());
  ASSERT_TRUE(tier.Find(TestKey(1)).has_value());  // 1 becomes most recently used: order 2, 3, 1
  ASSERT_TRUE(tier.Put(TestKey(4), TestPayload(4, 150), &evicted).ok());  // needs 2 and 3 out
  EXPECT_EQ(KeysOf(evicted), (std::vector<OffloadKey>{TestKey(2), TestKey(3)}));
  EXPECT_EQ(evicted[0].bytes, TestPayload(2, 100));
  EXPECT_EQ(evicted[1].bytes, TestPayload(3, 100));
  EXPECT_TRUE(tier.Contains(TestKey(1)));
  EXPECT_TRUE(tier.Contains(TestKey(4)));
  EXPECT_EQ(tier.bytes_used(), 250);
  evicted.clear();
  // Contains does not refresh: 1 is still older than 4.
  EXPECT_TRUE(tier.Contains(TestKey(1)));
  ASSERT_TRUE(tier.Put(TestKey(5), TestPayload(5, 100), &evicted).ok());
  EXPECT_EQ(KeysOf(evicted), (std::vector<OffloadKey>{TestKey(1)}));
  EXPECT_EQ(tier.stats().evictions, 3);
}

TEST(HostTierTest, EntryOverCapacityIsRefusedAndNothingChanges) {
  HostTier tier(100);
  ASSERT_TRUE(tier.Put(TestKey(1), TestPayload(1, 60), nullptr).ok());
  std::vector<OffloadEntry> evicted;
  const absl::Status status = tier.Put(TestKey(2), TestPayload(2, 101), &evicted);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("101 bytes exceeds the tier's capacity of 100 bytes"));
  EXPECT_THAT(status.message(), HasSubstr("--kv-offload-memory"));
  EXPECT_TRUE(evicted.empty());
  EXPECT_TRUE(tier.Contains(TestKey(1)));
  EXPECT_EQ(tier.stats().refused, 1);
  EXPECT_TRUE(tier.Put(TestKey(3), TestPayload(3, 100), &evicted).ok());  // exactly the capacity
  EXPECT_EQ(tier.bytes_used(), 100);
}

TEST(HostTierTest, PutOfAPresentKeyReplacesItsBytes) {
  HostTier tier(200);
  ASSERT_TRUE(tier.Put(TestKey(1), TestPayload(1, 100), nullptr).ok());
  ASSERT_TRUE(tier.Put(TestKey(2), TestPayload(2, 100), nullptr).ok());
  std::vector<OffloadEntry> evicted;
  ASSERT_TRUE(tier.Put(TestKey(1), TestPayload(9, 80), &evicted).ok());
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(tier.bytes_used(), 180);
  EXPECT_EQ(tier.Get(TestKey(1)), TestPayload(9, 80));
  EXPECT_TRUE(tier.Erase(TestKey(1)));
  EXPECT_FALSE(tier.Erase(TestKey(1)));
  EXPECT_EQ(tier.bytes_used(), 100);
  EXPECT_EQ(tier.num_entries(), 1);
}

TEST(HostTierTest, RandomOperationsNeverExceedTheBudgetAndMatchAModel) {
  constexpr int64_t kCapacity = 1000;
  HostTier tier(kCapacity);
  std::map<uint64_t, std::string> model;  // key number → bytes (present entries)
  std::mt19937_64 rng(42);
  for (int op = 0; op < 5000; ++op) {
    const uint64_t k = rng() % 40;
    switch (rng() % 4) {
      case 0:
      case 1: {
        std::string bytes = TestPayload(op, rng() % 300);
        std::vector<OffloadEntry> evicted;
        ASSERT_TRUE(tier.Put(TestKey(k), bytes, &evicted).ok());
        for (const OffloadEntry& e : evicted) {
          ASSERT_NE(e.key, TestKey(k));
          bool found = false;
          for (auto it = model.begin(); it != model.end(); ++it) {
            if (TestKey(it->first) == e.key) {
              ASSERT_EQ(it->second, e.bytes);
              model.erase(it);
              found = true;
              break;
            }
          }
          ASSERT_TRUE(found);
        }
        model[k] = std::move(bytes);
        break;
      }
      case 2: {
        const std::optional<std::string> got = tier.Get(TestKey(k));
        ASSERT_EQ(got.has_value(), model.contains(k));
        if (got.has_value()) {
          ASSERT_EQ(*got, model[k]);
        }
        break;
      }
      case 3:
        ASSERT_EQ(tier.Erase(TestKey(k)), model.erase(k) == 1);
        break;
    }
    int64_t model_bytes = 0;
    for (const auto& [key, bytes] : model) model_bytes += static_cast<int64_t>(bytes.size());
    ASSERT_EQ(tier.bytes_used(), model_bytes);
    ASSERT_LE(tier.bytes_used(), kCapacity);
    ASSERT_EQ(tier.num_entries(), static_cast<int64_t>(model.size()));
  }
}

}  // namespace
}  // namespace strata::kvcache
