// The flags of `strata serve`: the parsers (vLLM's --tool-call-parser / --reasoning-parser) and
// the KV offload tiers (--kv-offload-memory / --kv-offload-dir / --kv-offload-disk).
#include "server/cli/serve_flags.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata::cli {
namespace {

absl::StatusOr<ServeOptions> Options(const std::vector<std::string>& args) {
  absl::StatusOr<Flags> flags = Flags::Parse(args, ServeFlags());
  if (!flags.ok()) return flags.status();
  return ServeOptionsFromFlags(*flags);
}

TEST(ServeFlagsTest, ParserFlagsTakeKimiK2AndKimiK3) {
  for (const char* value : {"kimi_k2", "kimi_k3"}) {
    EXPECT_TRUE(Options({"--tool-call-parser", value}).ok()) << value;
    EXPECT_TRUE(Options({"--reasoning-parser", value}).ok()) << value;
  }
  for (const char* flag : {"--tool-call-parser", "--reasoning-parser"}) {
    absl::StatusOr<ServeOptions> refused = Options({flag, "hermes"});
    ASSERT_FALSE(refused.ok()) << flag;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("kimi_k2 or kimi_k3"));
    EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("got 'hermes'"));
  }
}

// Image URL opt-ins (docs/vision.md): hosts lower-cased from a list, the local directory must
// exist, the fetch timeout in seconds within its range.
TEST(ServeFlagsTest, MediaUrlFlagsParseAndRefuseBadValues) {
  absl::StatusOr<ServeOptions> on =
      Options({"--allowed-media-domains", "Images.Example.com,127.0.0.1",
               "--allowed-local-media-path", "/tmp", "--media-fetch-timeout", "2.5"});
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_THAT(on->allowed_media_domains, ::testing::ElementsAre("images.example.com", "127.0.0.1"));
  EXPECT_EQ(on->allowed_local_media_path, "/tmp");
  EXPECT_DOUBLE_EQ(on->media_fetch_timeout_s, 2.5);
  absl::StatusOr<ServeOptions> off = Options({});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(off->allowed_media_domains.empty());
  EXPECT_TRUE(off->allowed_local_media_path.empty());
  absl::StatusOr<ServeOptions> missing =
      Options({"--allowed-local-media-path", "/nonexistent/strata/images"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), ::testing::HasSubstr("is not a directory"));
  EXPECT_FALSE(Options({"--media-fetch-timeout", "0"}).ok());
  EXPECT_FALSE(Options({"--media-fetch-timeout", "abc"}).ok());
}

// The offload tiers' flags (docs/kv-offload.md): sizes and a directory read into ServeOptions;
// a disk size without a directory, an empty directory, a bad size and offload without prefix
// caching are refused naming what was wrong.
TEST(ServeFlagsTest, KvOffloadFlagsParseIntoServeOptions) {
  absl::StatusOr<ServeOptions> both = Options({"--kv-offload-memory", "8GiB", "--kv-offload-dir",
                                               "/tmp/kv", "--kv-offload-disk", "512MiB"});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->kv_offload_memory_bytes, int64_t{8} << 30);
  EXPECT_EQ(both->kv_offload_dir, "/tmp/kv");
  EXPECT_EQ(both->kv_offload_disk_bytes, std::optional<int64_t>(int64_t{512} << 20));
  EXPECT_TRUE(both->kv_offload());
  EXPECT_EQ(both->scheduler.max_tier_load_bytes_per_step, int64_t{256} << 20);  // the default
  absl::StatusOr<ServeOptions> per_step =
      Options({"--kv-offload-dir", "/tmp/kv", "--kv-offload-max-load-per-step", "1MiB"});
  ASSERT_TRUE(per_step.ok()) << per_step.status();
  EXPECT_EQ(per_step->scheduler.max_tier_load_bytes_per_step, int64_t{1} << 20);
  EXPECT_FALSE(Options({"--kv-offload-max-load-per-step", "0"}).ok());

  absl::StatusOr<ServeOptions> memory_only = Options({"--kv-offload-memory=1048576"});
  ASSERT_TRUE(memory_only.ok()) << memory_only.status();
  EXPECT_EQ(memory_only->kv_offload_memory_bytes, 1048576);
  EXPECT_TRUE(memory_only->kv_offload_dir.empty());
  EXPECT_FALSE(memory_only->kv_offload_disk_bytes.has_value());
  EXPECT_TRUE(memory_only->kv_offload());

  absl::StatusOr<ServeOptions> dir_only = Options({"--kv-offload-dir", "/var/cache/strata"});
  ASSERT_TRUE(dir_only.ok()) << dir_only.status();
  EXPECT_EQ(dir_only->kv_offload_memory_bytes, 0);
  EXPECT_EQ(dir_only->kv_offload_dir, "/var/cache/strata");
  EXPECT_FALSE(dir_only->kv_offload_disk_bytes.has_value());  // the default size
  EXPECT_TRUE(dir_only->kv_offload());

  absl::StatusOr<ServeOptions> none = Options({});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->kv_offload());
}

TEST(ServeFlagsTest, KvOffloadMemoryZeroMeansOff) {
  absl::StatusOr<ServeOptions> off = Options({"--kv-offload-memory", "0"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->kv_offload_memory_bytes, 0);
  EXPECT_FALSE(off->kv_offload());
  // Off, it needs no prefix caching.
  EXPECT_TRUE(Options({"--kv-offload-memory", "0", "--no-prefix-caching"}).ok());
}

// The disk tier's directory: the flag's for a process that runs every data-parallel group; a
// process running only some of them (one per rank or node) takes DIR/dp<its first group>.
TEST(ServeFlagsTest, KvOffloadDirIsEachProcesssOwnUnderDataParallelism) {
  const auto dir_of = [](std::vector<std::string> args) {
    args.insert(args.end(), {"--kv-offload-dir", "/cache/kv"});
    absl::StatusOr<ServeOptions> o = Options(args);
    EXPECT_TRUE(o.ok()) << o.status();
    return o.ok() ? OffloadDirOf(*o) : std::string();
  };
  EXPECT_EQ(dir_of({}), "/cache/kv");
  EXPECT_EQ(dir_of({"--data-parallel-size", "2"}), "/cache/kv");  // both groups here
  EXPECT_EQ(dir_of({"--replicas", "2"}), "/cache/kv");
  EXPECT_EQ(dir_of({"--world-size", "4", "--rank", "3", "--coordinator", "h:1"}), "/cache/kv/dp3");
  EXPECT_EQ(dir_of({"--world-size", "4", "--rank", "2", "--tensor-parallel-size", "2",
                    "--coordinator", "h:1"}),
            "/cache/kv/dp1");
  EXPECT_EQ(dir_of({"--world-size", "2", "--rank", "0", "--tensor-parallel-size", "2",
                    "--coordinator", "h:1"}),
            "/cache/kv");  // the one group's lead
}

TEST(ServeFlagsTest, KvOffloadFlagsRefuseBadValues) {
  auto refused = [](const std::vector<std::string>& args) {
    absl::StatusOr<ServeOptions> o = Options(args);
    EXPECT_FALSE(o.ok()) << testing::PrintToString(args);
    if (o.ok()) return std::string();
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(o.status().message());
  };
  using ::testing::HasSubstr;
  const std::string disk_without_dir = refused({"--kv-offload-disk", "1GiB"});
  EXPECT_THAT(disk_without_dir, HasSubstr("--kv-offload-disk"));
  EXPECT_THAT(disk_without_dir, HasSubstr("--kv-offload-dir"));

  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--kv-offload-dir", "/tmp/kv", "--no-prefix-caching"},
        std::vector<std::string>{"--kv-offload-memory", "1GiB", "--no-enable-prefix-caching"}}) {
    const std::string no_prefix = refused(args);
    EXPECT_THAT(no_prefix, HasSubstr("prefix caching")) << testing::PrintToString(args);
  }

  const std::string bad_size = refused({"--kv-offload-memory", "12XB"});
  EXPECT_THAT(bad_size, HasSubstr("--kv-offload-memory"));
  EXPECT_THAT(bad_size, HasSubstr("12XB"));
  EXPECT_THAT(refused({"--kv-offload-memory", "-1GiB"}), HasSubstr("--kv-offload-memory"));
  EXPECT_THAT(refused({"--kv-offload-dir", "/tmp/kv", "--kv-offload-disk", "0"}),
              HasSubstr("--kv-offload-disk"));

  EXPECT_THAT(refused({"--kv-offload-dir", ""}), HasSubstr("--kv-offload-dir: empty path"));
}

}  // namespace
}  // namespace strata::cli
