#include "core/host_memory.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(HostMemoryTest, ReadsMemAvailableInBytes) {
  EXPECT_EQ(ParseMemAvailableBytes("MemTotal:       24500000 kB\n"
                                   "MemFree:          100000 kB\n"
                                   "MemAvailable:   20000000 kB\n"
                                   "Buffers:            1234 kB\n"),
            int64_t{20000000} * 1024);
  EXPECT_EQ(ParseMemAvailableBytes("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(ParseMemAvailableBytes("MemAvailable: lots kB\n"), std::nullopt);
}

TEST(HostMemoryTest, CgroupLimitMinusAnonymousMemory) {
  const char* stat = "anon 3000000000\nfile 9000000000\nkernel 1000\nanon_thp 2000000000\n";
  EXPECT_EQ(CgroupAvailableBytes("8000000000\n", stat), int64_t{5000000000});
  EXPECT_EQ(CgroupAvailableBytes("max\n", stat), std::nullopt) << "no limit";
  EXPECT_EQ(CgroupAvailableBytes("1000\n", stat), 0) << "over the limit: nothing, not negative";
  EXPECT_EQ(CgroupAvailableBytes("4096\n", "anon_thp 5\nfile 7\n"), 4096) << "anon_thp is not anon";
}

TEST(HostMemoryTest, ThisHostReportsSomething) {
  const std::optional<int64_t> available = AvailableHostMemoryBytes();
  ASSERT_TRUE(available.has_value());  // Linux always has /proc/meminfo
  EXPECT_GT(*available, 0);
}

}  // namespace
}  // namespace strata
