// DiskTier: round trips, the budget and LRU, restart, identity separation, bad files, the lock,
// the bounded writer queue, read-ahead, and files and index agreeing after random operations.
#include "kvcache/offload/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/file.h"
#include "kvcache/offload/disk_entry.h"
#include "kvcache/offload/offload_testing.h"

namespace strata::kvcache {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::ScopedTempDir;
using testing::TestIdentity;
using testing::TestKey;
using testing::TestPayload;

constexpr int64_t kPayloadBytes = 1000;
constexpr int64_t kFileBytes = kPayloadBytes + kDiskEntryHeaderBytes;

std::unique_ptr<DiskTier> OpenOrDie(const std::string& dir, int64_t capacity_bytes,
                                    const OffloadIdentity& identity = TestIdentity(),
                                    const DiskTierOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<DiskTier>> tier =
      DiskTier::Open(dir, capacity_bytes, identity, options);
  EXPECT_TRUE(tier.ok()) << tier.status();
  return tier.ok() ? *std::move(tier) : nullptr;
}

// Every regular file under `dir`'s subdirectories (relative paths).
std::set<std::string> FilesIn(const std::string& dir) {
  std::set<std::string> files;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != "lock") {
      files.insert(fs::relative(e.path(), dir).string());
    }
  }
  return files;
}

void PutN(DiskTier& tier, int first, int count) {
  for (int i = first; i < first + count; ++i) {
    ASSERT_TRUE(tier.Put(TestKey(i), TestPayload(i, kPayloadBytes)).ok()) << i;
  }
}

// Loads `key` through the read-ahead path.
absl::StatusOr<std::string> PrefetchAndTake(DiskTier& tier, const OffloadKey& key) {
  tier.Prefetch({key});
  tier.WaitForPrefetches();
  std::optional<absl::StatusOr<std::string>> taken = tier.TakePrefetched(key);
  EXPECT_TRUE(taken.has_value());
  return taken.has_value() ? *std::move(taken) : absl::InternalError("still pending");
}

void SetMtime(const std::string& path, time_t seconds) {
  const timespec times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

TEST(DiskTierTest, RoundTripsBeforeAndAfterTheWrite) {
  const ScopedTempDir dir("roundtrip");
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
  tier->SetPausedForTesting(true);
  ASSERT_TRUE(tier->Put(TestKey(1), TestPayload(1, kPayloadBytes)).ok());
  const OffloadKey checkpoint = TestKey(2, OffloadKind::kKdaCheckpoint);
  ASSERT_TRUE(tier->Put(checkpoint, TestPayload(2, 3 * kPayloadBytes)).ok());
  EXPECT_TRUE(tier->Contains(TestKey(1)));
  EXPECT_FALSE(tier->Contains(TestKey(2)));
  EXPECT_FALSE(fs::exists(tier->PathOf(TestKey(1))));  // queued, served from memory
  EXPECT_EQ(*tier->Get(TestKey(1)), TestPayload(1, kPayloadBytes));
  tier->SetPausedForTesting(false);
  tier->Flush();
  ASSERT_TRUE(fs::exists(tier->PathOf(TestKey(1))));
  EXPECT_EQ(fs::file_size(tier->PathOf(checkpoint)), 3 * kPayloadBytes + kDiskEntryHeaderBytes);
  EXPECT_EQ(*tier->Get(TestKey(1)), TestPayload(1, kPayloadBytes));
  EXPECT_EQ(*tier->Get(checkpoint), TestPayload(2, 3 * kPayloadBytes));
  EXPECT_EQ(tier->Get(TestKey(3)).status().code(), absl::StatusCode::kNotFound);
  const DiskTierStats stats = tier->stats();
  EXPECT_EQ(stats.num_entries, 2);
  EXPECT_EQ(stats.bytes_used, 4 * kPayloadBytes + 2 * kDiskEntryHeaderBytes);
  EXPECT_EQ(stats.bytes_written, 4 * kPayloadBytes + 2 * kDiskEntryHeaderBytes);
  EXPECT_EQ(stats.hits, 3);
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.bytes_read, 5 * kPayloadBytes);
  EXPECT_EQ(stats.load_latency.count, 3);
  EXPECT_EQ(stats.queued_writes, 0);
  EXPECT_EQ(stats.queued_write_bytes, 0);
}

TEST(DiskTierTest, EvictsLeastRecentlyUsedFilesWithinTheBudget) {
  const ScopedTempDir dir("lru");
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 3 * kFileBytes + 10);
  PutN(*tier, 1, 3);
  ASSERT_TRUE(tier->Get(TestKey(1)).ok());  // order 2, 3, 1
  PutN(*tier, 4, 1);                        // evicts 2
  EXPECT_FALSE(tier->Contains(TestKey(2)));
  ASSERT_TRUE(tier->Put(TestKey(3), "ignored: the key names the bytes").ok());  // 3 refreshed
  PutN(*tier, 5, 1);                                                            // evicts 1
  EXPECT_FALSE(tier->Contains(TestKey(1)));
  EXPECT_TRUE(tier->Contains(TestKey(3)));
  EXPECT_TRUE(tier->Contains(TestKey(4)));
  EXPECT_TRUE(tier->Contains(TestKey(5)));
  tier->Flush();
  EXPECT_EQ(FilesIn(dir.path()).size(), 3u);
  EXPECT_FALSE(fs::exists(tier->PathOf(TestKey(1))));
  EXPECT_FALSE(fs::exists(tier->PathOf(TestKey(2))));
  EXPECT_EQ(*tier->Get(TestKey(3)), TestPayload(3, kPayloadBytes));
  const DiskTierStats stats = tier->stats();
  EXPECT_EQ(stats.evictions, 2);
  EXPECT_EQ(stats.bytes_used, 3 * kFileBytes);
  EXPECT_LE(stats.bytes_used, stats.capacity_bytes);
}

TEST(DiskTierTest, EntryOverCapacityIsRefusedWithTheSizes) {
  const ScopedTempDir dir("refuse");
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), kFileBytes);
  ASSERT_TRUE(tier->Put(TestKey(1), TestPayload(1, kPayloadBytes)).ok());  // exactly fits
  const absl::Status status = tier->Put(TestKey(2), TestPayload(2, kPayloadBytes + 1));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("1065 bytes (64-byte header included) exceeds the "
                                          "tier's capacity of 1064 bytes (--kv-offload-disk)"));
  EXPECT_TRUE(tier->Contains(TestKey(1)));
  EXPECT_EQ(tier->stats().refused_puts, 1);
}

TEST(DiskTierTest, RestartFindsEveryEntryWrittenBefore) {
  const ScopedTempDir dir("restart");
  {
    std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
    PutN(*tier, 1, 20);
    ASSERT_TRUE(tier->Put(TestKey(1, OffloadKind::kKdaCheckpoint), TestPayload(99, 777)).ok());
  }  // the destructor drains the writer queue
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
  const DiskTierStats stats = tier->stats();
  EXPECT_EQ(stats.num_entries, 21);
  EXPECT_EQ(stats.bytes_used, 20 * kFileBytes + 777 + kDiskEntryHeaderBytes);
  EXPECT_EQ(stats.corrupt_entries, 0);
  EXPECT_EQ(stats.foreign_files, 0);
  EXPECT_GE(stats.open_scan_seconds, 0);
  for (int i = 1; i <= 20; ++i) {
    ASSERT_TRUE(tier->Contains(TestKey(i)));
    ASSERT_EQ(*PrefetchAndTake(*tier, TestKey(i)), TestPayload(i, kPayloadBytes)) << i;
  }
  EXPECT_EQ(*tier->Get(TestKey(1, OffloadKind::kKdaCheckpoint)), TestPayload(99, 777));
}

TEST(DiskTierTest, RestartOrdersTheLruByFileTimeAndEvictsForASmallerCapacity) {
  const ScopedTempDir dir("restart_lru");
  std::vector<std::string> paths;
  {
    std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
    PutN(*tier, 1, 4);
    tier->Flush();
    for (int i = 1; i <= 4; ++i) paths.push_back(tier->PathOf(TestKey(i)));
  }
  // Last used: 3 oldest, then 1, 4, 2.
  SetMtime(paths[2], 1000);
  SetMtime(paths[0], 2000);
  SetMtime(paths[3], 3000);
  SetMtime(paths[1], 4000);
  {
    std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 3 * kFileBytes);  // one too many
    EXPECT_EQ(tier->stats().evictions, 1);
    EXPECT_FALSE(tier->Contains(TestKey(3)));
    PutN(*tier, 5, 1);  // evicts the next oldest: 1
    EXPECT_FALSE(tier->Contains(TestKey(1)));
    EXPECT_TRUE(tier->Contains(TestKey(4)));
    EXPECT_TRUE(tier->Contains(TestKey(2)));
    tier->Flush();
    EXPECT_FALSE(fs::exists(paths[2]));
    EXPECT_FALSE(fs::exists(paths[0]));
  }
}

TEST(DiskTierTest, AnotherIdentityFindsNothingAndLeavesTheFiles) {
  const ScopedTempDir dir("identity");
  {
    std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
    PutN(*tier, 1, 5);
  }
  const std::set<std::string> files = FilesIn(dir.path());
  ASSERT_EQ(files.size(), 5u);
  std::vector<OffloadIdentity> others(4, TestIdentity());
  others[0].cache_dtype = "bf16";
  others[1].tensor_parallel_size = 4;
  others[2].tensor_parallel_rank = 0;
  others[3].checkpoint_fingerprint = "fedcba9876543210fedcba9876543210";
  for (const OffloadIdentity& other : others) {
    std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20, other);
    EXPECT_EQ(tier->stats().num_entries, 0);
    EXPECT_EQ(tier->stats().foreign_files, 5);
    EXPECT_EQ(tier->stats().corrupt_entries, 0);
    for (int i = 1; i <= 5; ++i) EXPECT_FALSE(tier->Contains(TestKey(i)));
    EXPECT_EQ(tier->Get(TestKey(1)).status().code(), absl::StatusCode::kNotFound);
    // Its own entry of the same key is a separate file.
    ASSERT_TRUE(tier->Put(TestKey(1), TestPayload(1000, 10)).ok());
    tier->Flush();
    EXPECT_EQ(*tier->Get(TestKey(1)), TestPayload(1000, 10));
    ASSERT_TRUE(tier->Erase(TestKey(1)));
  }
  EXPECT_EQ(FilesIn(dir.path()), files);
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
  EXPECT_EQ(tier->stats().num_entries, 5);
  EXPECT_EQ(*tier->Get(TestKey(1)), TestPayload(1, kPayloadBytes));
}

TEST(DiskTierTest, AnotherIdentityNeverReadsTheFiles) {
  // Zeroed files of identity A would be deleted as corrupt if B opened them: B must neither
  // count nor delete them.
  const ScopedTempDir dir("identity_unread");
  {
    std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
    PutN(*tier, 1, 3);
  }
  for (const std::string& file : FilesIn(dir.path())) {
    std::ofstream(dir.path() + "/" + file, std::ios::trunc) << std::string(100, '\0');
  }
  OffloadIdentity other = TestIdentity();
  other.cache_dtype = "bf16";
  {
    std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20, other);
    EXPECT_EQ(tier->stats().corrupt_entries, 0);
    EXPECT_EQ(tier->stats().foreign_files, 3);
  }
  EXPECT_EQ(FilesIn(dir.path()).size(), 3u);
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);  // A: its own, bad: deleted
  EXPECT_EQ(tier->stats().corrupt_entries, 3);
  EXPECT_EQ(tier->stats().num_entries, 0);
  EXPECT_TRUE(FilesIn(dir.path()).empty());
}

TEST(DiskTierTest, CorruptPayloadByteIsDataLossAndTheEntryIsDropped) {
  const ScopedTempDir dir("corrupt");
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
  PutN(*tier, 1, 2);
  tier->Flush();
  for (int i = 1; i <= 2; ++i) {
    const std::string path = tier->PathOf(TestKey(i));
    std::string bytes = *ReadFileToString(path);
    bytes[kDiskEntryHeaderBytes + 500] ^= 0x40;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  const absl::StatusOr<std::string> got = tier->Get(TestKey(1));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("payload checksum mismatch"));
  EXPECT_FALSE(tier->Contains(TestKey(1)));
  EXPECT_EQ(tier->Get(TestKey(1)).status().code(), absl::StatusCode::kNotFound);
  // The read-ahead path too.
  EXPECT_EQ(PrefetchAndTake(*tier, TestKey(2)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(tier->Contains(TestKey(2)));
  tier->Flush();
  EXPECT_TRUE(FilesIn(dir.path()).empty());
  const DiskTierStats stats = tier->stats();
  EXPECT_EQ(stats.corrupt_entries, 2);
  EXPECT_EQ(stats.num_entries, 0);
  EXPECT_EQ(stats.bytes_used, 0);
  EXPECT_EQ(stats.hits, 0);
  EXPECT_EQ(stats.misses, 3);
}

TEST(DiskTierTest, FileTruncatedWhileRunningIsDataLoss) {
  const ScopedTempDir dir("truncated_live");
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
  PutN(*tier, 1, 1);
  tier->Flush();
  fs::resize_file(tier->PathOf(TestKey(1)), kDiskEntryHeaderBytes + 10);
  EXPECT_EQ(tier->Get(TestKey(1)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(tier->Contains(TestKey(1)));
}

TEST(DiskTierTest, BadFilesAreSkippedAtOpenAndForeignOnesLeftAlone) {
  const ScopedTempDir dir("bad_files");
  std::string truncated, zeroed, swapped_a, garbage, tmp, foreign, misplaced;
  {
    std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
    PutN(*tier, 1, 6);
    tier->Flush();
    truncated = tier->PathOf(TestKey(1));
    zeroed = tier->PathOf(TestKey(2));
    swapped_a = tier->PathOf(TestKey(3));
    garbage = tier->PathOf(TestKey(7));
    tmp = tier->PathOf(TestKey(8)) + ".tmp";
    foreign = dir.path() + "/00/notes.txt";
    fs::resize_file(truncated, 500);
    std::ofstream(zeroed, std::ios::trunc) << std::string(kFileBytes, '\0');
    fs::copy_file(tier->PathOf(TestKey(4)), swapped_a, fs::copy_options::overwrite_existing);
    std::ofstream(garbage) << "not an entry";
    std::ofstream(tmp) << "half a write";
    std::ofstream(foreign) << "operator's file";
    // Entry 5's file moved into another subdirectory.
    const std::string subdir = DiskEntrySubdir(TestKey(5)) == "00" ? "01" : "00";
    misplaced =
        dir.path() + "/" + subdir + "/" + fs::path(tier->PathOf(TestKey(5))).filename().string();
    fs::rename(tier->PathOf(TestKey(5)), misplaced);
  }
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
  const DiskTierStats stats = tier->stats();
  EXPECT_EQ(stats.num_entries, 2);  // 4 and 6
  EXPECT_EQ(stats.corrupt_entries, 5);
  EXPECT_EQ(stats.tmp_files_removed, 1);
  EXPECT_EQ(stats.foreign_files, 1);
  EXPECT_TRUE(tier->Contains(TestKey(4)));
  EXPECT_TRUE(tier->Contains(TestKey(6)));
  EXPECT_EQ(*tier->Get(TestKey(4)), TestPayload(4, kPayloadBytes));
  for (const std::string& path : {truncated, zeroed, swapped_a, garbage, tmp, misplaced}) {
    EXPECT_FALSE(fs::exists(path)) << path;
  }
  EXPECT_TRUE(fs::exists(foreign));
}

TEST(DiskTierTest, SecondOpenOfTheSameDirectoryIsRefusedWhileTheFirstLives) {
  const ScopedTempDir dir("lock");
  {
    std::unique_ptr<DiskTier> first = OpenOrDie(dir.path(), 1 << 20);
    const absl::StatusOr<std::unique_ptr<DiskTier>> second =
        DiskTier::Open(dir.path(), 1 << 20, TestIdentity());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(second.status().message(), HasSubstr("--kv-offload-dir " + dir.path()));
    EXPECT_THAT(second.status().message(), HasSubstr("in use by another process"));
  }
  EXPECT_NE(OpenOrDie(dir.path(), 1 << 20), nullptr);
}

TEST(DiskTierTest, OpenRejectsBadArgumentsNamingThem) {
  const ScopedTempDir dir("bad_args");
  OffloadIdentity identity = TestIdentity();
  identity.block_size = 0;
  absl::Status status = DiskTier::Open(dir.path(), 1 << 20, identity).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("block_size is 0"));
  status = DiskTier::Open(dir.path(), 64, TestIdentity()).status();
  EXPECT_THAT(status.message(), HasSubstr("--kv-offload-disk is 64 bytes"));
  std::ofstream(dir.path() + "/file") << "x";
  status = DiskTier::Open(dir.path() + "/file/tier", 1 << 20, TestIdentity()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--kv-offload-dir: cannot create"));
}

TEST(DiskTierTest, FullWriterQueueDropsPutsAndCountsThem) {
  const ScopedTempDir dir("queue");
  DiskTierOptions options;
  options.max_queued_writes = 2;
  options.max_queued_write_bytes = 3 * kPayloadBytes;
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20, TestIdentity(), options);
  tier->SetPausedForTesting(true);
  PutN(*tier, 1, 2);
  const absl::Status status = tier->Put(TestKey(3), TestPayload(3, kPayloadBytes));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("writer queue full"));
  EXPECT_FALSE(tier->Contains(TestKey(3)));
  DiskTierStats stats = tier->stats();
  EXPECT_EQ(stats.dropped_puts, 1);
  EXPECT_EQ(stats.queued_writes, 2);
  EXPECT_EQ(stats.queued_write_bytes, 2 * kPayloadBytes);
  tier->SetPausedForTesting(false);
  tier->Flush();
  // The byte bound: one entry of 2.5 payloads fits an empty queue, a second one does not.
  tier->SetPausedForTesting(true);
  ASSERT_TRUE(tier->Put(TestKey(4), TestPayload(4, 5 * kPayloadBytes / 2)).ok());
  EXPECT_EQ(tier->Put(TestKey(5), TestPayload(5, kPayloadBytes)).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(tier->stats().dropped_puts, 2);
  tier->SetPausedForTesting(false);
  tier->Flush();
  // An entry over the byte bound still goes through an empty queue.
  ASSERT_TRUE(tier->Put(TestKey(6), TestPayload(6, 4 * kPayloadBytes)).ok());
  tier->Flush();
  stats = tier->stats();
  EXPECT_EQ(stats.num_entries, 4);
  EXPECT_EQ(stats.queued_writes, 0);
  EXPECT_EQ(FilesIn(dir.path()).size(), 4u);
}

TEST(DiskTierTest, FailedWriteDropsTheEntryAndKeepsServing) {
  const ScopedTempDir dir("write_failure");
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
  // Entry 1's subdirectory replaced by a plain file: its write cannot create the file.
  const std::string subdir = dir.path() + "/" + DiskEntrySubdir(TestKey(1));
  fs::remove_all(subdir);
  std::ofstream(subdir) << "in the way";
  PutN(*tier, 1, 1);
  tier->Flush();
  EXPECT_FALSE(tier->Contains(TestKey(1)));
  DiskTierStats stats = tier->stats();
  EXPECT_EQ(stats.write_failures, 1);
  EXPECT_EQ(stats.bytes_used, 0);
  EXPECT_EQ(stats.bytes_written, 0);
  int other = 2;
  while (DiskEntrySubdir(TestKey(other)) == DiskEntrySubdir(TestKey(1))) ++other;
  PutN(*tier, other, 1);
  tier->Flush();
  EXPECT_EQ(*tier->Get(TestKey(other)), TestPayload(other, kPayloadBytes));
}

TEST(DiskTierTest, PrefetchIsServedOnceAndPendingUntilLoaded) {
  const ScopedTempDir dir("prefetch");
  std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), 1 << 20);
  PutN(*tier, 1, 3);
  tier->Flush();
  tier->SetPausedForTesting(true);
  tier->Prefetch({TestKey(1), TestKey(2), TestKey(9)});
  EXPECT_FALSE(tier->TakePrefetched(TestKey(1)).has_value());  // still loading
  EXPECT_EQ(tier->stats().prefetches_pending, 2);
  EXPECT_EQ(tier->stats().misses, 1);  // 9 is absent
  tier->SetPausedForTesting(false);
  tier->WaitForPrefetches();
  EXPECT_EQ(tier->stats().prefetched_bytes, 2 * kPayloadBytes);
  std::optional<absl::StatusOr<std::string>> one = tier->TakePrefetched(TestKey(1));
  ASSERT_TRUE(one.has_value());
  ASSERT_TRUE(one->ok());
  EXPECT_EQ(**one, TestPayload(1, kPayloadBytes));
  // Handed over once; an absent key was never requested.
  EXPECT_EQ(tier->TakePrefetched(TestKey(1))->status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tier->TakePrefetched(TestKey(9))->status().code(), absl::StatusCode::kNotFound);
  tier->CancelPrefetch(TestKey(2));
  EXPECT_EQ(tier->stats().prefetched_bytes, 0);
  EXPECT_EQ(tier->TakePrefetched(TestKey(2))->status().code(), absl::StatusCode::kNotFound);
  // A request cancelled before the reader gets to it is dropped; evicted ones are NotFound.
  tier->SetPausedForTesting(true);
  tier->Prefetch({TestKey(2), TestKey(3)});
  tier->CancelPrefetch(TestKey(2));
  ASSERT_TRUE(tier->Erase(TestKey(3)));
  tier->SetPausedForTesting(false);
  tier->WaitForPrefetches();
  EXPECT_EQ(tier->TakePrefetched(TestKey(3))->status().code(), absl::StatusCode::kNotFound);
  const DiskTierStats stats = tier->stats();
  EXPECT_EQ(stats.prefetches_pending, 0);
  EXPECT_EQ(stats.prefetched_bytes, 0);
  EXPECT_EQ(stats.hits, 2);
}

TEST(DiskTierTest, RandomOperationsKeepFilesAndIndexInAgreement) {
  const ScopedTempDir dir("random");
  constexpr int64_t kCapacity = 8 * kFileBytes;
  DiskTierOptions options;
  options.max_queued_writes = 3;
  std::map<int, std::string> written;  // key number → the bytes its entry holds
  std::mt19937_64 rng(7);
  for (int round = 0; round < 3; ++round) {
    std::unique_ptr<DiskTier> tier = OpenOrDie(dir.path(), kCapacity, TestIdentity(), options);
    for (int op = 0; op < 400; ++op) {
      const int k = static_cast<int>(rng() % 24);
      switch (rng() % 5) {
        case 0:
        case 1: {
          // A key's bytes are always the same, as a block hash's are.
          std::string bytes = TestPayload(k, kPayloadBytes / 2 + (k * 37) % kPayloadBytes);
          const bool present = tier->Contains(TestKey(k));
          if (tier->Put(TestKey(k), bytes).ok() && !present) written[k] = std::move(bytes);
          break;
        }
        case 2:
          tier->Prefetch({TestKey(k)});
          break;
        case 3: {
          std::optional<absl::StatusOr<std::string>> taken = tier->TakePrefetched(TestKey(k));
          if (taken.has_value() && taken->ok()) {
            ASSERT_EQ(**taken, written[k]);
          }
          break;
        }
        case 4:
          if (rng() % 2 == 0) {
            tier->CancelPrefetch(TestKey(k));
          } else {
            tier->Erase(TestKey(k));
          }
          break;
      }
      ASSERT_LE(tier->stats().bytes_used, kCapacity);
    }
    tier->Flush();
    tier->WaitForPrefetches();
    // The files on disk are exactly the indexed entries, and each reads back its bytes.
    std::set<std::string> expected_files;
    int64_t expected_bytes = 0;
    for (const auto& [k, bytes] : written) {
      if (!tier->Contains(TestKey(k))) continue;
      expected_files.insert(fs::relative(tier->PathOf(TestKey(k)), dir.path()).string());
      expected_bytes += kDiskEntryHeaderBytes + static_cast<int64_t>(bytes.size());
      ASSERT_EQ(*tier->Get(TestKey(k)), bytes);
    }
    EXPECT_EQ(FilesIn(dir.path()), expected_files);
    EXPECT_EQ(tier->stats().bytes_used, expected_bytes);
    EXPECT_EQ(tier->stats().num_entries, static_cast<int64_t>(expected_files.size()));
  }
}

}  // namespace
}  // namespace strata::kvcache
