// OffloadTiers: where entries go, host evictions spilling to disk, loads from each tier, stats.
#include "kvcache/offload/offload_tiers.h"

#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/offload/disk_entry.h"
#include "kvcache/offload/offload_testing.h"

namespace strata::kvcache {
namespace {

using ::testing::HasSubstr;
using testing::ScopedTempDir;
using testing::TestIdentity;
using testing::TestKey;
using testing::TestPayload;

constexpr int64_t kTierPayloadBytes = 1000;

std::unique_ptr<DiskTier> OpenDisk(const std::string& dir, int64_t capacity_bytes) {
  absl::StatusOr<std::unique_ptr<DiskTier>> tier =
      DiskTier::Open(dir, capacity_bytes, TestIdentity());
  EXPECT_TRUE(tier.ok()) << tier.status();
  return tier.ok() ? *std::move(tier) : nullptr;
}

absl::StatusOr<std::string> LoadFromDisk(OffloadTiers& tiers, const OffloadKey& key) {
  tiers.Prefetch({key});
  tiers.disk()->WaitForPrefetches();
  std::optional<absl::StatusOr<std::string>> taken = tiers.TakePrefetched(key);
  EXPECT_TRUE(taken.has_value());
  return taken.has_value() ? *std::move(taken) : absl::InternalError("still pending");
}

TEST(OffloadTiersTest, HostEvictionsSpillToDiskAndLoadBackFromThere) {
  const ScopedTempDir dir("tiers_spill");
  OffloadTiers tiers(std::make_unique<HostTier>(2 * kTierPayloadBytes),
                     OpenDisk(dir.path(), 1 << 20));
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(tiers.Store(TestKey(i), TestPayload(i, kTierPayloadBytes)).ok());
  }
  EXPECT_EQ(tiers.Contains(TestKey(1)), OffloadTier::kDisk);  // the oldest went down
  EXPECT_EQ(tiers.Contains(TestKey(2)), OffloadTier::kHost);
  EXPECT_EQ(tiers.Contains(TestKey(3)), OffloadTier::kHost);
  EXPECT_EQ(tiers.Contains(TestKey(4)), OffloadTier::kNone);
  EXPECT_EQ(tiers.Load(TestKey(2)), TestPayload(2, kTierPayloadBytes));
  EXPECT_EQ(tiers.Load(TestKey(1)), std::nullopt);  // not in host memory: use the prefetch path
  tiers.Flush();
  EXPECT_EQ(*LoadFromDisk(tiers, TestKey(1)), TestPayload(1, kTierPayloadBytes));
  const OffloadTiersStats stats = tiers.Stats();
  ASSERT_TRUE(stats.host.has_value());
  ASSERT_TRUE(stats.disk.has_value());
  EXPECT_EQ(stats.spilled_entries, 1);
  EXPECT_EQ(stats.spilled_bytes, kTierPayloadBytes);
  EXPECT_EQ(stats.host->hits, 1);
  EXPECT_EQ(stats.host->misses, 1);
  EXPECT_EQ(stats.host->evictions, 1);
  EXPECT_EQ(stats.host_load_latency.count, 1);
  EXPECT_EQ(stats.disk->hits, 1);
  EXPECT_EQ(stats.disk->num_entries, 1);
  EXPECT_EQ(stats.disk->bytes_written, kTierPayloadBytes + kDiskEntryHeaderBytes);
  EXPECT_EQ(stats.disk->load_latency.count, 1);
}

TEST(OffloadTiersTest, PrefetchSkipsKeysTheHostTierHolds) {
  const ScopedTempDir dir("tiers_prefetch");
  OffloadTiers tiers(std::make_unique<HostTier>(1 << 20), OpenDisk(dir.path(), 1 << 20));
  ASSERT_TRUE(tiers.disk()->Put(TestKey(1), TestPayload(1, 10)).ok());
  ASSERT_TRUE(tiers.Store(TestKey(1), TestPayload(1, 10)).ok());
  EXPECT_EQ(tiers.Contains(TestKey(1)), OffloadTier::kHost);  // host answers first
  tiers.Prefetch({TestKey(1)});
  EXPECT_EQ(tiers.Stats().disk->prefetches_pending + tiers.Stats().disk->hits, 0);
  EXPECT_EQ(tiers.TakePrefetched(TestKey(1))->status().code(), absl::StatusCode::kNotFound);
}

TEST(OffloadTiersTest, WithoutAHostTierEntriesGoStraightToDisk) {
  const ScopedTempDir dir("tiers_disk_only");
  OffloadTiers tiers(nullptr, OpenDisk(dir.path(), 1 << 20));
  ASSERT_TRUE(tiers.Store(TestKey(1), TestPayload(1, kTierPayloadBytes)).ok());
  EXPECT_EQ(tiers.Contains(TestKey(1)), OffloadTier::kDisk);
  EXPECT_EQ(tiers.Load(TestKey(1)), std::nullopt);
  EXPECT_EQ(*LoadFromDisk(tiers, TestKey(1)), TestPayload(1, kTierPayloadBytes));
  EXPECT_FALSE(tiers.Stats().host.has_value());
}

TEST(OffloadTiersTest, EntryBiggerThanTheHostTierGoesToDisk) {
  const ScopedTempDir dir("tiers_big");
  OffloadTiers tiers(std::make_unique<HostTier>(kTierPayloadBytes), OpenDisk(dir.path(), 1 << 20));
  ASSERT_TRUE(tiers.Store(TestKey(1), TestPayload(1, kTierPayloadBytes / 2)).ok());
  ASSERT_TRUE(tiers.Store(TestKey(2), TestPayload(2, 2 * kTierPayloadBytes)).ok());
  EXPECT_EQ(tiers.Contains(TestKey(1)), OffloadTier::kHost);  // not pushed out by it
  EXPECT_EQ(tiers.Contains(TestKey(2)), OffloadTier::kDisk);
  // Too big for both: the disk tier's error.
  const absl::Status status = tiers.Store(TestKey(3), std::string(2 << 20, 'x'));
  EXPECT_THAT(status.message(), HasSubstr("--kv-offload-disk"));
}

TEST(OffloadTiersTest, HostOnlyDropsEvictionsAndRefusesOversizedEntries) {
  OffloadTiers tiers(std::make_unique<HostTier>(2 * kTierPayloadBytes), nullptr);
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(tiers.Store(TestKey(i), TestPayload(i, kTierPayloadBytes)).ok());
  }
  EXPECT_EQ(tiers.Contains(TestKey(1)), OffloadTier::kNone);
  const absl::Status status = tiers.Store(TestKey(4), TestPayload(4, 3 * kTierPayloadBytes));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--kv-offload-memory"));
  tiers.Prefetch({TestKey(1)});
  EXPECT_EQ(tiers.TakePrefetched(TestKey(1))->status().code(), absl::StatusCode::kNotFound);
  const OffloadTiersStats stats = tiers.Stats();
  EXPECT_EQ(stats.dropped_entries, 1);
  EXPECT_EQ(stats.spilled_entries, 0);
  EXPECT_FALSE(stats.disk.has_value());
  EXPECT_STREQ(OffloadTierName(OffloadTier::kDisk), "disk");
}

TEST(OffloadTiersTest, SpilledEntriesSurviveARestart) {
  const ScopedTempDir dir("tiers_restart");
  {
    OffloadTiers tiers(std::make_unique<HostTier>(kTierPayloadBytes),
                       OpenDisk(dir.path(), 1 << 20));
    for (int i = 1; i <= 4; ++i) {
      ASSERT_TRUE(tiers.Store(TestKey(i), TestPayload(i, kTierPayloadBytes)).ok());
    }
  }
  {
    // Without SpillHostToDisk only what had spilled is there: the host tier's entry is gone.
    OffloadTiers tiers(std::make_unique<HostTier>(2 * kTierPayloadBytes),
                       OpenDisk(dir.path(), 1 << 20));
    for (int i = 1; i <= 3; ++i) {
      ASSERT_EQ(tiers.Contains(TestKey(i)), OffloadTier::kDisk) << i;
      EXPECT_EQ(*LoadFromDisk(tiers, TestKey(i)), TestPayload(i, kTierPayloadBytes));
    }
    EXPECT_EQ(tiers.Contains(TestKey(4)), OffloadTier::kNone);
    for (int i = 4; i <= 6; ++i) {
      ASSERT_TRUE(tiers.Store(TestKey(i), TestPayload(i, kTierPayloadBytes)).ok());
    }
    EXPECT_EQ(tiers.Contains(TestKey(5)), OffloadTier::kHost);
    EXPECT_EQ(tiers.SpillHostToDisk(), 2);
    EXPECT_EQ(tiers.Stats().host->num_entries, 0);
  }
  OffloadTiers tiers(nullptr, OpenDisk(dir.path(), 1 << 20));
  for (int i = 1; i <= 6; ++i) {
    ASSERT_EQ(tiers.Contains(TestKey(i)), OffloadTier::kDisk) << i;
    EXPECT_EQ(*LoadFromDisk(tiers, TestKey(i)), TestPayload(i, kTierPayloadBytes));
  }
}

}  // namespace
}  // namespace strata::kvcache
