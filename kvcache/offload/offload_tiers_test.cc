// OffloadTiers: where entries go, host evictions spilling to disk, loads from each tier, stats.
#include "kvcache/offload/offload_tiers.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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

// Two engine loops (data-parallel groups) ask for the same disk entry: one read, both get the
// bytes; a third caller that never asked gets NotFound.
TEST(OffloadTiersTest, RequestersOfOneKeyShareItsRead) {
  const ScopedTempDir dir("tiers_shared_read");
  OffloadTiers tiers(nullptr, OpenDisk(dir.path(), 1 << 20));
  ASSERT_TRUE(tiers.Store(TestKey(1), TestPayload(1, kTierPayloadBytes)).ok());
  tiers.Flush();
  tiers.Prefetch({TestKey(1)});
  tiers.Prefetch({TestKey(1)});
  tiers.disk()->WaitForPrefetches();
  for (int requester = 0; requester < 2; ++requester) {
    std::optional<absl::StatusOr<std::string>> taken = tiers.TakePrefetched(TestKey(1));
    ASSERT_TRUE(taken.has_value() && taken->ok()) << requester;
    EXPECT_EQ(**taken, TestPayload(1, kTierPayloadBytes)) << requester;
  }
  EXPECT_EQ(tiers.TakePrefetched(TestKey(1))->status().code(), absl::StatusCode::kNotFound);
  const DiskTierStats disk = *tiers.Stats().disk;
  EXPECT_EQ(disk.hits, 1);  // one file read
  EXPECT_EQ(disk.prefetches_pending + disk.prefetched_bytes, 0);
}

// One of two waiters cancels (its request was aborted): the other still gets the bytes; when the
// last waiter cancels, nothing stays held.
TEST(OffloadTiersTest, ACancelLeavesTheOtherRequestersRead) {
  const ScopedTempDir dir("tiers_shared_cancel");
  OffloadTiers tiers(nullptr, OpenDisk(dir.path(), 1 << 20));
  for (int i = 1; i <= 2; ++i) {
    ASSERT_TRUE(tiers.Store(TestKey(i), TestPayload(i, kTierPayloadBytes)).ok());
  }
  tiers.Flush();
  tiers.disk()->SetPausedForTesting(true);  // both cancels land before the reads run
  tiers.Prefetch({TestKey(1), TestKey(2)});
  tiers.Prefetch({TestKey(1), TestKey(2)});
  tiers.CancelPrefetch(TestKey(1));
  tiers.CancelPrefetch(TestKey(2));
  tiers.CancelPrefetch(TestKey(2));  // key 2: nobody is left
  tiers.disk()->SetPausedForTesting(false);
  tiers.disk()->WaitForPrefetches();
  std::optional<absl::StatusOr<std::string>> taken = tiers.TakePrefetched(TestKey(1));
  ASSERT_TRUE(taken.has_value() && taken->ok());
  EXPECT_EQ(**taken, TestPayload(1, kTierPayloadBytes));
  EXPECT_EQ(tiers.TakePrefetched(TestKey(2))->status().code(), absl::StatusCode::kNotFound);
  const DiskTierStats disk = *tiers.Stats().disk;
  EXPECT_EQ(disk.prefetches_pending + disk.prefetched_bytes, 0);
  EXPECT_EQ(disk.hits, 1);  // key 2 was never read
}

// Four engine loops store, look up, load and read back through one OffloadTiers at once: every
// byte read back is what was stored under its key, the budgets hold, no read stays held.
TEST(OffloadTiersTest, EngineLoopsShareTheTiersFromTheirThreads) {
  const ScopedTempDir dir("tiers_threads");
  constexpr int kThreads = 4;
  constexpr int kKeysPerThread = 60;
  OffloadTiers tiers(std::make_unique<HostTier>(8 * kTierPayloadBytes),
                     OpenDisk(dir.path(), 40 * (kTierPayloadBytes + kDiskEntryHeaderBytes)));
  std::atomic<int> wrong{0};
  std::atomic<int> loaded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kKeysPerThread; ++i) {
        // Keys overlap between neighbouring threads, so stores, loads and reads of one key race.
        // Every other lookup is of the key this thread stored 10 steps ago (spilled to disk by
        // now, and not yet evicted: at most 40 newer entries, 48 fit), the others of the one the
        // previous thread stores at this step.
        const uint64_t mine = static_cast<uint64_t>(t * kKeysPerThread / 2 + i);
        (void)tiers.Store(TestKey(mine), TestPayload(mine, kTierPayloadBytes));
        const uint64_t other =
            i % 2 == 0 && i >= 10
                ? mine - 10
                : static_cast<uint64_t>((t + kThreads - 1) % kThreads * kKeysPerThread / 2 + i);
        const auto check = [&](const std::string& bytes) {
          ++loaded;
          if (bytes != TestPayload(other, kTierPayloadBytes)) ++wrong;
        };
        switch (tiers.Contains(TestKey(other))) {
          case OffloadTier::kHost:
            if (std::optional<std::string> bytes = tiers.Load(TestKey(other))) check(*bytes);
            break;
          case OffloadTier::kDisk: {
            tiers.Prefetch({TestKey(other)});
            if (i % 3 == 0) {
              tiers.CancelPrefetch(TestKey(other));
              break;
            }
            std::optional<absl::StatusOr<std::string>> taken;
            while (!(taken = tiers.TakePrefetched(TestKey(other))).has_value()) {
              std::this_thread::yield();
            }
            if (taken->ok()) check(**taken);  // NotFound: evicted before it was read
            break;
          }
          case OffloadTier::kNone:
            break;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  tiers.Flush();
  tiers.disk()->WaitForPrefetches();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(loaded.load(), 0);
  const OffloadTiersStats stats = tiers.Stats();
  EXPECT_LE(stats.host->bytes_used, stats.host->capacity_bytes);
  EXPECT_LE(stats.disk->bytes_used, stats.disk->capacity_bytes);
  EXPECT_GT(stats.disk->hits, 0);  // reads from disk took part
  EXPECT_EQ(stats.disk->prefetches_pending + stats.disk->prefetched_bytes, 0);
}

}  // namespace
}  // namespace strata::kvcache
