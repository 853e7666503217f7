// Disk entry files: names, header encoding, and reads that reject every kind of bad file.
#include "kvcache/offload/disk_entry.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/file.h"
#include "kvcache/offload/offload_testing.h"

namespace strata::kvcache {
namespace {

using ::testing::HasSubstr;
using testing::ScopedTempDir;
using testing::TestKey;
using testing::TestPayload;

constexpr uint64_t kIdentity = 0x1122334455667788ull;

TEST(DiskEntryTest, HeaderRoundTripsAndIsSixtyFourBytes) {
  DiskEntryHeader header;
  header.kind = OffloadKind::kKdaCheckpoint;
  header.identity_fingerprint = kIdentity;
  header.key_hash = 0xdeadbeefcafef00dull;
  header.payload_bytes = 12345;
  header.payload_checksum = 0x0102030405060708ull;
  const std::string bytes = EncodeDiskEntryHeader(header);
  ASSERT_EQ(bytes.size(), static_cast<size_t>(kDiskEntryHeaderBytes));
  EXPECT_EQ(bytes.substr(0, 8), "STRKVOFF");
  const absl::StatusOr<DiskEntryHeader> decoded = DecodeDiskEntryHeader(bytes, "p");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->kind, header.kind);
  EXPECT_EQ(decoded->identity_fingerprint, header.identity_fingerprint);
  EXPECT_EQ(decoded->key_hash, header.key_hash);
  EXPECT_EQ(decoded->payload_bytes, header.payload_bytes);
  EXPECT_EQ(decoded->payload_checksum, header.payload_checksum);
}

TEST(DiskEntryTest, DecodeRejectsEveryChangedHeaderByte) {
  const std::string bytes = EncodeDiskEntryHeader(DiskEntryHeader{});
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string changed = bytes;
    changed[i] ^= 0x10;
    const absl::StatusOr<DiskEntryHeader> decoded = DecodeDiskEntryHeader(changed, "p");
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss) << i;
  }
  EXPECT_THAT(DecodeDiskEntryHeader(std::string(64, '\0'), "p").status().message(),
              HasSubstr("bad magic"));
}

TEST(DiskEntryTest, FileNamesRoundTripAndOtherNamesAreRejected) {
  const OffloadKey key{0xab00000000000001ull, OffloadKind::kKdaCheckpoint};
  const std::string name = DiskEntryFileName(kIdentity, key);
  EXPECT_EQ(name, "1122334455667788-2-ab00000000000001.kvo");
  EXPECT_EQ(DiskEntrySubdir(key), "ab");
  const std::optional<ParsedDiskEntryName> parsed = ParseDiskEntryFileName(name);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->identity_fingerprint, kIdentity);
  EXPECT_EQ(parsed->key, key);
  for (const char* bad :
       {"", "lock", "1122334455667788-2-ab00000000000001.kvo.tmp",
        "1122334455667788-3-ab00000000000001.kvo", "1122334455667788-2-AB00000000000001.kvo",
        "1122334455667788_2_ab00000000000001.kvo", "112233445566778g-2-ab00000000000001.kvo"}) {
    EXPECT_FALSE(ParseDiskEntryFileName(bad).has_value()) << bad;
  }
}

class DiskEntryFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteDiskEntry(path_, kIdentity, key_, payload_, /*fsync=*/false).ok());
  }
  absl::StatusOr<std::string> Read() {
    return ReadDiskEntry(path_, kIdentity, key_, static_cast<int64_t>(payload_.size()));
  }
  void Rewrite(const std::string& bytes) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
  }

  const ScopedTempDir tmp_{"entry"};
  const std::string path_ = tmp_.path() + "/e.kvo";
  const OffloadKey key_ = TestKey(3);
  const std::string payload_ = TestPayload(3, 5000);
};

TEST_F(DiskEntryFileTest, RoundTripsAndLeavesNoTemporary) {
  const absl::StatusOr<std::string> read = Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, payload_);
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp"));
  EXPECT_EQ(std::filesystem::file_size(path_), payload_.size() + kDiskEntryHeaderBytes);
  const absl::StatusOr<DiskEntryFileInfo> info = ReadDiskEntryHeader(path_, kIdentity, key_);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->file_bytes, static_cast<int64_t>(payload_.size()) + kDiskEntryHeaderBytes);
}

TEST_F(DiskEntryFileTest, ChangedPayloadByteIsDataLoss) {
  std::string bytes = *ReadFileToString(path_);
  bytes[kDiskEntryHeaderBytes + 4321] ^= 0x01;
  Rewrite(bytes);
  const absl::StatusOr<std::string> read = Read();
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr("payload checksum mismatch"));
  EXPECT_THAT(read.status().message(), HasSubstr(path_));
  // The header alone still looks fine: only a full read can tell.
  EXPECT_TRUE(ReadDiskEntryHeader(path_, kIdentity, key_).ok());
}

TEST_F(DiskEntryFileTest, TruncatedFileIsDataLoss) {
  std::filesystem::resize_file(path_, kDiskEntryHeaderBytes + 100);
  EXPECT_THAT(Read().status().message(), HasSubstr("truncated"));
  EXPECT_EQ(ReadDiskEntryHeader(path_, kIdentity, key_).status().code(),
            absl::StatusCode::kDataLoss);
  std::filesystem::resize_file(path_, 10);
  EXPECT_THAT(Read().status().message(), HasSubstr("shorter than the 64-byte header"));
  std::filesystem::resize_file(path_, 0);
  EXPECT_EQ(Read().status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(DiskEntryFileTest, ZeroedFileIsDataLoss) {
  Rewrite(std::string(kDiskEntryHeaderBytes + payload_.size(), '\0'));
  EXPECT_THAT(Read().status().message(), HasSubstr("bad magic"));
}

TEST_F(DiskEntryFileTest, AnotherIdentityOrKeyIsDataLoss) {
  EXPECT_THAT(ReadDiskEntry(path_, kIdentity + 1, key_, 5000).status().message(),
              HasSubstr("identity fingerprint"));
  // A swapped file: another key's entry under this key's name.
  EXPECT_THAT(ReadDiskEntry(path_, kIdentity, TestKey(4), 5000).status().message(),
              HasSubstr("its name says"));
  EXPECT_THAT(ReadDiskEntry(path_, kIdentity, {key_.hash, OffloadKind::kKdaCheckpoint}, 5000)
                  .status()
                  .message(),
              HasSubstr("its name says"));
  EXPECT_THAT(ReadDiskEntry(path_, kIdentity, key_, 4999).status().message(),
              HasSubstr("the index says 4999"));
}

TEST_F(DiskEntryFileTest, MissingFileIsNotFound) {
  std::filesystem::remove(path_);
  EXPECT_EQ(Read().status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace strata::kvcache
