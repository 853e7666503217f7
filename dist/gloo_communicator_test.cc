// Gloo communicator tests: every rank is a real process (fork) talking TCP over 127.0.0.1.
// Expected results are computed independently in each rank from the known inputs of all ranks.
#include "dist/gloo_communicator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/fork_ranks_test_util.h"
#include "dist/testing/collective_checks.h"

namespace strata::dist {
namespace {

using std::chrono::milliseconds;
using testing::Describe;
using testing::ForkRanks;
using testing::FreePort;
using testing::RankReport;
using Clock = std::chrono::steady_clock;

RendezvousOptions Options(int world_size, int rank, int port, milliseconds timeout) {
  RendezvousOptions options = testing::LoopbackOptions(world_size, rank, port, "test");
  options.connect_timeout = milliseconds(10000);
  options.timeout = timeout;
  return options;
}

void ExpectAllOk(const std::vector<RankReport>& reports, int world_size) {
  ASSERT_EQ(reports.size(), static_cast<size_t>(world_size));
  for (const RankReport& report : reports) {
    EXPECT_TRUE(report.ok) << "rank " << report.rank << ": " << report.message;
  }
}

std::string RunAllCollectives(int world_size, int rank, int port) {
  auto comm = ConnectGloo(Options(world_size, rank, port, milliseconds(10000)));
  if (!comm.ok()) return Describe(comm.status(), "connect");
  Communicator& c = **comm;
  if (c.rank() != rank || c.world_size() != world_size || c.backend() != "gloo") {
    return "wrong rank, world_size or backend\n";
  }
  std::string errors = testing::CheckEveryCollective(c);
  // Large all-reduces take Gloo's reduce-scatter + all-gather path.
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    errors += testing::CheckAllReduceInt(c, 20011, op);
    errors += testing::CheckAllReduceFloat(c, 40009, op);
  }
  return errors;
}

class GlooCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectivesTest, EveryCollectiveMatchesIndependentResult) {
  const int world_size = GetParam();
  const int port = FreePort();
  ExpectAllOk(
      ForkRanks(world_size, [&](int rank) { return RunAllCollectives(world_size, rank, port); }),
      world_size);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectivesTest, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return absl::StrCat("World", info.param); });

TEST(GlooCommunicatorTest, WorldSizeOneNeedsNoCoordinator) {
  RendezvousOptions options;
  options.coordinator = "";  // never parsed: a single rank opens no socket
  auto comm = ConnectGloo(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> data = {1.5f, -2.0f};
  ASSERT_TRUE((*comm)->AllReduce(data.data(), 2, ReduceOp::kSum).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  const int64_t bytes[1] = {3};
  const char send[3] = {'a', 'b', 'c'};
  char recv[3] = {};
  ASSERT_TRUE((*comm)->AllToAllV(send, bytes, recv, bytes).ok());
  EXPECT_EQ(std::string(recv, 3), "abc");
}

// Ranks 0 and 1 call an all-reduce that rank 2 never joins; both must name rank 2 within the
// timeout, and refuse later calls.
TEST(GlooCommunicatorTest, SilentRankIsNamedWithinTimeout) {
  const int port = FreePort();
  const auto reports = ForkRanks(3, [&](int rank) -> std::string {
    auto comm = ConnectGloo(Options(3, rank, port, milliseconds(1000)));
    if (!comm.ok()) return Describe(comm.status(), "connect");
    if (rank == 2) {
      std::this_thread::sleep_for(milliseconds(1500));  // alive, but never calls
      return "";
    }
    int64_t value = 1;
    const auto start = Clock::now();
    const absl::Status status = (*comm)->AllReduce(&value, 1, ReduceOp::kSum);
    const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    std::string errors;
    if (status.code() != absl::StatusCode::kDeadlineExceeded ||
        !absl::StrContains(status.message(), "all-reduce #1: rank 2 did not answer within 1 s")) {
      errors += absl::StrCat("unexpected status: ", status.ToString(), "\n");
    }
    if (elapsed < milliseconds(900) || elapsed > milliseconds(2500)) {
      errors += absl::StrCat("failed after ", elapsed.count(), " ms, limit 1000 ms\n");
    }
    const absl::Status again = (*comm)->Barrier();
    if (again.code() != absl::StatusCode::kFailedPrecondition ||
        !absl::StrContains(again.message(), "unusable after an earlier error")) {
      errors += absl::StrCat("call after the error: ", again.ToString(), "\n");
    }
    return errors;
  });
  ExpectAllOk(reports, 3);
}

// Rank 1 exits between two collectives; the others fail at once (well before their 20 s
// timeout) and name it.
TEST(GlooCommunicatorTest, ExitedRankFailsOthersFast) {
  const int port = FreePort();
  const auto reports = ForkRanks(4, [&](int rank) -> std::string {
    auto comm = ConnectGloo(Options(4, rank, port, milliseconds(20000)));
    if (!comm.ok()) return Describe(comm.status(), "connect");
    if (!(*comm)->Barrier().ok()) return "first barrier failed\n";
    if (rank == 1) ::_exit(0);  // no goodbye
    std::this_thread::sleep_for(milliseconds(100));
    std::vector<char> send(4 * 64, 'x'), recv(4 * 64);
    const auto start = Clock::now();
    const absl::Status status = (*comm)->AllToAll(send.data(), recv.data(), 64);
    const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    std::string errors;
    if (status.ok() || !absl::StrContains(status.message(), "all-to-all #2: ") ||
        !absl::StrContains(status.message(), "connection to rank 1 closed (peer exited?)")) {
      errors += absl::StrCat("unexpected status: ", status.ToString(), "\n");
    }
    if (elapsed > milliseconds(3000)) errors += absl::StrCat("took ", elapsed.count(), " ms\n");
    return errors;
  });
  ExpectAllOk(reports, 4);
}

TEST(GlooCommunicatorTest, DifferentCollectivesAreReportedNotMixed) {
  const int port = FreePort();
  const auto reports = ForkRanks(2, [&](int rank) -> std::string {
    auto comm = ConnectGloo(Options(2, rank, port, milliseconds(5000)));
    if (!comm.ok()) return Describe(comm.status(), "connect");
    std::vector<float> data(4, 1.0f);
    const absl::Status status = rank == 0 ? (*comm)->AllReduce(data.data(), 4, ReduceOp::kSum)
                                          : (*comm)->Broadcast(data.data(), 16, 0);
    const std::string other =
        rank == 0 ? "rank 1 is in broadcast(root 0) #1" : "rank 0 is in all-reduce(sum, f32) #1";
    if (status.code() != absl::StatusCode::kFailedPrecondition ||
        !absl::StrContains(status.message(), other)) {
      return absl::StrCat("unexpected status: ", status.ToString(), "\n");
    }
    return "";
  });
  ExpectAllOk(reports, 2);
}

TEST(GlooCommunicatorTest, DisagreeingCountsAreReported) {
  const int port = FreePort();
  const auto reports = ForkRanks(2, [&](int rank) -> std::string {
    auto comm = ConnectGloo(Options(2, rank, port, milliseconds(5000)));
    if (!comm.ok()) return Describe(comm.status(), "connect");
    // Rank 0 sends 8 bytes to rank 1, which expects 4.
    const int64_t send_bytes[2] = {0, rank == 0 ? 8 : 0};
    const int64_t recv_bytes[2] = {rank == 1 ? 4 : 0, 0};
    char send[8] = {}, recv[8] = {};
    const absl::Status status = (*comm)->AllToAllV(send, send_bytes, recv, recv_bytes);
    const std::string expected = rank == 1 ? "rank 0 sends 8 bytes but this rank expects 4"
                                           : "rank 1 expects 4 bytes but this rank sends 8";
    if (status.code() != absl::StatusCode::kFailedPrecondition ||
        !absl::StrContains(status.message(), expected)) {
      return absl::StrCat("unexpected status: ", status.ToString(), "\n");
    }
    return "";
  });
  ExpectAllOk(reports, 2);
}

TEST(GlooCommunicatorTest, UnreachableCoordinatorIsNamedWithinConnectTimeout) {
  const int port = FreePort();  // nobody listens here
  RendezvousOptions options = Options(2, 1, port, milliseconds(1000));
  options.connect_timeout = milliseconds(500);
  const auto start = Clock::now();
  auto comm = ConnectGloo(options);
  const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(
      comm.status().message(),
      absl::StrCat("rank 1 could not reach coordinator 127.0.0.1:", port, " within 500 ms")))
      << comm.status();
  EXPECT_GE(elapsed, milliseconds(500));
  EXPECT_LT(elapsed, milliseconds(2000));
}

}  // namespace
}  // namespace strata::dist
