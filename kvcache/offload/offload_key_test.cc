// Offload keys and identities: the identity fingerprint separates every field; the checkpoint
// fingerprint follows the weights, not the path.
#include "kvcache/offload/offload_key.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "kvcache/offload/offload_testing.h"

namespace strata::kvcache {
namespace {

using ::testing::HasSubstr;
using testing::ScopedTempDir;
using testing::TestIdentity;
using testing::TestPayload;

TEST(OffloadKeyTest, KeysOfOtherKindOrHashAreDistinct) {
  absl::flat_hash_set<OffloadKey> keys;
  keys.insert({1, OffloadKind::kLatentBlock});
  keys.insert({1, OffloadKind::kKdaCheckpoint});
  keys.insert({2, OffloadKind::kLatentBlock});
  keys.insert({1, OffloadKind::kLatentBlock});
  EXPECT_EQ(keys.size(), 3u);
  EXPECT_STREQ(OffloadKindName(OffloadKind::kKdaCheckpoint), "kda_checkpoint");
  EXPECT_TRUE(IsOffloadKind(1));
  EXPECT_TRUE(IsOffloadKind(2));
  EXPECT_FALSE(IsOffloadKind(0));
  EXPECT_FALSE(IsOffloadKind(3));
}

TEST(OffloadIdentityTest, EveryFieldChangesTheFingerprint) {
  const OffloadIdentity base = TestIdentity();
  const uint64_t fingerprint = OffloadIdentityFingerprint(base);
  EXPECT_EQ(OffloadIdentityFingerprint(TestIdentity()), fingerprint);
  std::vector<OffloadIdentity> others(7, base);
  others[0].checkpoint_fingerprint = "ffffffffffffffffffffffffffffffff";
  others[1].cache_dtype = "bf16";
  others[2].block_size = 32;
  others[3].tensor_parallel_size = 4;
  others[4].tensor_parallel_rank = 0;
  others[5].context_parallel_size = 2;
  others[6].context_parallel_size = 2;
  others[6].context_parallel_rank = 1;
  absl::flat_hash_set<uint64_t> seen = {fingerprint};
  for (const OffloadIdentity& other : others) {
    EXPECT_TRUE(seen.insert(OffloadIdentityFingerprint(other)).second);
  }
}

TEST(OffloadIdentityTest, ValidationNamesTheFieldAndLimit) {
  EXPECT_TRUE(ValidateOffloadIdentity(TestIdentity()).ok());
  OffloadIdentity identity = TestIdentity();
  identity.tensor_parallel_rank = 2;
  absl::Status status = ValidateOffloadIdentity(identity);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tensor_parallel_rank is 2, must be in [0, 2)"));
  identity = TestIdentity();
  identity.cache_dtype.clear();
  EXPECT_THAT(ValidateOffloadIdentity(identity).message(), HasSubstr("cache_dtype"));
  identity = TestIdentity();
  identity.block_size = 0;
  EXPECT_THAT(ValidateOffloadIdentity(identity).message(), HasSubstr("block_size is 0"));
}

// A checkpoint directory with config.json and one safetensors file of one f32 tensor whose
// values come from `seed`.
void WriteCheckpoint(const std::string& dir, uint64_t seed, int64_t num_floats) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"hidden_size": 64, "num_layers": 2})";
  std::string header = absl::StrCat(R"({"w":{"dtype":"F32","shape":[)", num_floats,
                                    R"(],"data_offsets":[0,)", num_floats * 4, "]}}");
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(dir + "/model.safetensors", std::ios::binary)
      << length << header << TestPayload(seed, static_cast<size_t>(num_floats) * 4);
}

// Changes the byte at `data_offset` of the tensor data of `dir`'s safetensors file.
void FlipDataByte(const std::string& dir, int64_t data_offset) {
  const std::string path = dir + "/model.safetensors";
  std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
  char length[8];
  file.read(length, 8);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<uint8_t>(length[i]);
  file.seekg(static_cast<std::streamoff>(8 + header_bytes + data_offset));
  char byte;
  file.read(&byte, 1);
  byte ^= 0x5a;
  file.seekp(static_cast<std::streamoff>(8 + header_bytes + data_offset));
  file.write(&byte, 1);
}

TEST(CheckpointFingerprintTest, SameShapesOtherWeightsDifferAndCopiesAreEqual) {
  const ScopedTempDir tmp("fingerprint");
  for (int64_t num_floats : {int64_t{1000}, int64_t{1} << 19}) {  // fully read; sampled
    SCOPED_TRACE(num_floats);
    const std::string a = absl::StrCat(tmp.path(), "/a", num_floats);
    const std::string b = absl::StrCat(tmp.path(), "/b", num_floats);
    const std::string copy = absl::StrCat(tmp.path(), "/elsewhere/copy", num_floats);
    WriteCheckpoint(a, /*seed=*/1, num_floats);
    WriteCheckpoint(b, /*seed=*/2, num_floats);
    WriteCheckpoint(copy, /*seed=*/1, num_floats);
    const absl::StatusOr<std::string> fa = CheckpointFingerprint(a);
    const absl::StatusOr<std::string> fb = CheckpointFingerprint(b);
    const absl::StatusOr<std::string> fcopy = CheckpointFingerprint(copy);
    ASSERT_TRUE(fa.ok()) << fa.status();
    ASSERT_TRUE(fb.ok()) << fb.status();
    ASSERT_TRUE(fcopy.ok()) << fcopy.status();
    EXPECT_EQ(fa->size(), 32u);
    EXPECT_NE(*fa, *fb);
    EXPECT_EQ(*fa, *fcopy);
    // One changed byte of tensor data inside a sampled window (the first and the last).
    FlipDataByte(copy, 0);
    EXPECT_NE(*CheckpointFingerprint(copy), *fa);
    FlipDataByte(copy, 0);
    EXPECT_EQ(*CheckpointFingerprint(copy), *fa);
    FlipDataByte(copy, num_floats * 4 - 1);
    EXPECT_NE(*CheckpointFingerprint(copy), *fa);
  }
}

TEST(CheckpointFingerprintTest, ReadsOnlySampledWindowsOfLargeFiles) {
  // The documented limit: 2 MiB of data, 8 windows of 64 KiB; byte 150,000 lies between the
  // first two windows (0..65,535 and 290,230..355,765), so changing it goes unnoticed.
  const ScopedTempDir tmp("fingerprint_windows");
  const std::string dir = tmp.path() + "/ckpt";
  WriteCheckpoint(dir, 1, int64_t{1} << 19);
  const std::string before = *CheckpointFingerprint(dir);
  FlipDataByte(dir, 150000);
  EXPECT_EQ(*CheckpointFingerprint(dir), before);
  FlipDataByte(dir, 290230);
  EXPECT_NE(*CheckpointFingerprint(dir), before);
}

TEST(CheckpointFingerprintTest, ConfigChangesTheFingerprint) {
  const ScopedTempDir tmp("fingerprint_config");
  WriteCheckpoint(tmp.path() + "/a", 1, 100);
  WriteCheckpoint(tmp.path() + "/b", 1, 100);
  std::ofstream(tmp.path() + "/b/config.json") << R"({"hidden_size": 64, "num_layers": 3})";
  EXPECT_NE(*CheckpointFingerprint(tmp.path() + "/a"), *CheckpointFingerprint(tmp.path() + "/b"));
}

TEST(CheckpointFingerprintTest, MissingOrIncompleteCheckpointIsAClearError) {
  const ScopedTempDir tmp("fingerprint_missing");
  const std::string missing = tmp.path() + "/nope";
  absl::StatusOr<std::string> fingerprint = CheckpointFingerprint(missing);
  EXPECT_EQ(fingerprint.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(fingerprint.status().message(), HasSubstr(missing));
  EXPECT_THAT(fingerprint.status().message(), HasSubstr("not a directory"));

  const std::string empty = tmp.path() + "/empty";
  std::filesystem::create_directories(empty);
  std::ofstream(empty + "/config.json") << "{}";
  fingerprint = CheckpointFingerprint(empty);
  EXPECT_EQ(fingerprint.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(fingerprint.status().message(), HasSubstr("no *.safetensors"));

  const std::string no_config = tmp.path() + "/no_config";
  WriteCheckpoint(no_config, 1, 10);
  std::filesystem::remove(no_config + "/config.json");
  fingerprint = CheckpointFingerprint(no_config);
  EXPECT_EQ(fingerprint.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(fingerprint.status().message(), HasSubstr("config.json"));

  const std::string truncated = tmp.path() + "/truncated";
  WriteCheckpoint(truncated, 1, 10);
  std::filesystem::resize_file(truncated + "/model.safetensors", 20);
  fingerprint = CheckpointFingerprint(truncated);
  EXPECT_EQ(fingerprint.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(fingerprint.status().message(), HasSubstr("model.safetensors"));
}

}  // namespace
}  // namespace strata::kvcache
