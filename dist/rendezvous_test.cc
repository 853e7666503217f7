// Rendezvous tests: the TCP key-value store with ranks as real processes on 127.0.0.1.
#include "dist/rendezvous.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/fork_ranks_test_util.h"

namespace strata::dist {
namespace {

using std::chrono::milliseconds;
using testing::ForkRanks;
using testing::FreePort;
using testing::RankReport;

RendezvousOptions Options(int world_size, int rank, int port, const std::string& group) {
  RendezvousOptions options = testing::LoopbackOptions(world_size, rank, port, group);
  options.connect_timeout = milliseconds(10000);
  return options;
}

void ExpectAllOk(const std::vector<RankReport>& reports) {
  for (const RankReport& report : reports) {
    EXPECT_TRUE(report.ok) << "rank " << report.rank << ": " << report.message;
  }
}

TEST(RendezvousTest, ParsesHostAndPort) {
  auto parsed = ParseHostPort("leader.svc.local:29500");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->host, "leader.svc.local");
  EXPECT_EQ(parsed->port, 29500);
  EXPECT_FALSE(ParseHostPort("no-port").ok());
  EXPECT_FALSE(ParseHostPort(":29500").ok());
  EXPECT_FALSE(ParseHostPort("host:0").ok());
  EXPECT_FALSE(ParseHostPort("host:65536").ok());
  EXPECT_FALSE(ParseHostPort("host:12x").ok());
}

TEST(RendezvousTest, FormatsLimitsForMessages) {
  EXPECT_EQ(FormatDuration(milliseconds(60000)), "60 s");
  EXPECT_EQ(FormatDuration(milliseconds(2500)), "2.5 s");
  EXPECT_EQ(FormatDuration(milliseconds(250)), "250 ms");
}

TEST(RendezvousTest, LoopbackCoordinatorMeansLoopbackLocalAddress) {
  auto local = LocalAddressToward("127.0.0.1");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, "127.0.0.1");
}

TEST(RendezvousTest, UnreachableCoordinatorIsNamedWithinConnectTimeout) {
  const int port = FreePort();  // nobody listens here
  RendezvousOptions options = Options(3, 2, port, "g");
  options.connect_timeout = milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  auto rendezvous = Rendezvous::Connect(options);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(rendezvous.ok());
  EXPECT_EQ(rendezvous.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(
      rendezvous.status().message(),
      absl::StrCat("rank 2 could not reach coordinator 127.0.0.1:", port, " within 300 ms")))
      << rendezvous.status();
  EXPECT_GE(elapsed, milliseconds(300));
  EXPECT_LT(elapsed, milliseconds(1500));
}

// Every rank publishes a value; all see all values in rank order. Keys of two groups on one
// coordinator do not mix, and a rank that starts late (after rank 0) still gets through.
TEST(RendezvousTest, AllGatherAcrossProcessesAndGroups) {
  const int port = FreePort();
  ExpectAllOk(ForkRanks(3, [&](int rank) -> std::string {
    if (rank == 2) std::this_thread::sleep_for(milliseconds(300));
    auto a = Rendezvous::Connect(Options(3, rank, port, "a"));
    auto b = Rendezvous::Connect(Options(3, rank, port, "b"));
    if (!a.ok() || !b.ok())
      return absl::StrCat("connect: ", a.status().ToString(), " / ", b.status().ToString());
    auto in_a = (*a)->AllGather("values", absl::StrCat("a", rank * 10), milliseconds(5000));
    auto in_b = (*b)->AllGather("values", absl::StrCat("b", rank), milliseconds(5000));
    if (!in_a.ok() || !in_b.ok()) {
      return absl::StrCat("all-gather: ", in_a.status().ToString(), in_b.status().ToString());
    }
    if (*in_a != std::vector<std::string>{"a0", "a10", "a20"} ||
        *in_b != std::vector<std::string>{"b0", "b1", "b2"}) {
      return "wrong values";
    }
    // Rank 0 serves the store: it stays until the others have had the reply to their checked
    // Set. Each sends "exit/<rank>" only after that reply arrived; rank 0 may exit before
    // answering "exit/<rank>" itself, so that last Set is not checked (as below).
    if (rank != 0) {
      if (!(*a)->Set(absl::StrCat("finished/", rank), "").ok()) return "set failed";
      (*a)->Set(absl::StrCat("exit/", rank), "").IgnoreError();
      return "";
    }
    for (int r = 1; r < 3; ++r) {
      if (!(*a)->Get(absl::StrCat("exit/", r), milliseconds(5000)).ok()) return "exit";
    }
    return "";
  }));
}

// Sub-groups of a world (tensor-parallel groups among data-parallel ones): the world's rank 0
// serves the store; sub-group 1's rank 0 (world rank 2, another process) only connects.
TEST(RendezvousTest, SubGroupsMeetAtTheWorldsStore) {
  const int port = FreePort();
  ExpectAllOk(ForkRanks(4, [&](int rank) -> std::string {
    if (rank == 2) std::this_thread::sleep_for(milliseconds(200));
    auto world = Rendezvous::Connect(Options(4, rank, port, "world"));
    if (!world.ok()) return world.status().ToString();
    const int group = rank / 2;
    RendezvousOptions sub = Options(2, rank % 2, port, absl::StrCat("sub-", group));
    sub.rank0_serves_store = group == 0;
    auto mine = Rendezvous::Connect(sub);
    if (!mine.ok()) return mine.status().ToString();
    auto values = (*mine)->AllGather("values", absl::StrCat("v", rank), milliseconds(5000));
    if (!values.ok()) return values.status().ToString();
    const std::vector<std::string> expected = {absl::StrCat("v", 2 * group),
                                               absl::StrCat("v", 2 * group + 1)};
    if (*values != expected) return absl::StrCat("sub-group ", group, ": wrong values");
    if (rank != 0) {  // rank 0 serves until every other rank had its checked reply
      if (!(*world)->Set(absl::StrCat("finished/", rank), "").ok()) return "set failed";
      (*world)->Set(absl::StrCat("exit/", rank), "").IgnoreError();
      return "";
    }
    for (int r = 1; r < 4; ++r) {
      if (!(*world)->Get(absl::StrCat("exit/", r), milliseconds(5000)).ok()) return "exit";
    }
    return "";
  }));
}

TEST(RendezvousTest, MissingRanksAndKeysAreNamed) {
  const int port = FreePort();
  ExpectAllOk(ForkRanks(4, [&](int rank) -> std::string {
    if (rank >= 2) return "";  // ranks 2 and 3 never show up
    auto rendezvous = Rendezvous::Connect(Options(4, rank, port, "g"));
    if (!rendezvous.ok()) return rendezvous.status().ToString();
    std::string errors;
    const absl::Status barrier = (*rendezvous)->Barrier("start", milliseconds(400));
    if (barrier.code() != absl::StatusCode::kDeadlineExceeded ||
        !absl::StrContains(barrier.message(),
                           absl::StrCat("rank ", rank, ": rendezvous 'g' at 127.0.0.1:", port,
                                        ": ranks 2, 3 did not arrive at 'start' within 400 ms"))) {
      errors += absl::StrCat("barrier: ", barrier.ToString(), "\n");
    }
    auto value = (*rendezvous)->Get("never-set", milliseconds(100));
    if (value.status().code() != absl::StatusCode::kDeadlineExceeded ||
        !absl::StrContains(value.status().message(), "key 'never-set' was not set within 100 ms")) {
      errors += absl::StrCat("get: ", value.status().ToString(), "\n");
    }
    // Rank 0 (whose process hosts the store) keeps serving until rank 1 has had the reply to
    // its checked Set: rank 1 only sends "rank1-exit" after that reply arrived. Rank 0 may exit
    // before answering "rank1-exit" itself, so that last Set is not checked.
    if (rank == 1) {
      if (!(*rendezvous)->Set("rank1-done", "").ok()) errors += "set\n";
      (*rendezvous)->Set("rank1-exit", "").IgnoreError();
    }
    if (rank == 0 && !(*rendezvous)->Get("rank1-exit", milliseconds(5000)).ok()) errors += "get\n";
    return errors;
  }));
}

}  // namespace
}  // namespace strata::dist
