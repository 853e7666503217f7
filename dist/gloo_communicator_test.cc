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

namespace strata::dist {
namespace {

using std::chrono::milliseconds;
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

// Failure description for the child's report ("" when fine).
std::string Describe(const absl::Status& status, const char* what) {
  return status.ok() ? "" : absl::StrCat(what, ": ", status.ToString(), "\n");
}

// ---- inputs every rank can compute for every other rank -----------------------------------

// Bytes rank `from` sends to rank `to` in the all-to-all-v test: uneven, zero for some pairs
// (including some self pairs).
int64_t PartBytes(int from, int to) {
  if ((from + 2 * to) % 3 == 0) return 0;
  return 1 + (from * 37 + to * 11) % 53;
}
char PartByte(int from, int to, int64_t i) { return static_cast<char>(from * 31 + to * 17 + i); }

int64_t IntInput(int rank, int64_t i) { return (rank + 1) * 1000003 + (rank % 2 ? -i : i * 3); }
float FloatInput(int rank, int64_t i) {
  return static_cast<float>((rank * 131 + i * 7) % 1000) / 7.0f - 50.0f;
}

std::string CheckAllToAllV(Communicator& comm) {
  const int n = comm.world_size();
  const int self = comm.rank();
  std::vector<int64_t> send_bytes(n), recv_bytes(n);
  std::vector<char> send, expected;
  for (int p = 0; p < n; ++p) {
    send_bytes[p] = PartBytes(self, p);
    recv_bytes[p] = PartBytes(p, self);
    for (int64_t i = 0; i < send_bytes[p]; ++i) send.push_back(PartByte(self, p, i));
    for (int64_t i = 0; i < recv_bytes[p]; ++i) expected.push_back(PartByte(p, self, i));
  }
  std::vector<char> recv(expected.size() + 1, '\x7f');
  std::string error =
      Describe(comm.AllToAllV(send.data(), send_bytes.data(), recv.data(), recv_bytes.data()),
               "all-to-all-v");
  if (!error.empty()) return error;
  if (std::memcmp(recv.data(), expected.data(), expected.size()) != 0) {
    return "all-to-all-v: received bytes differ from the senders' parts\n";
  }
  if (recv.back() != '\x7f') return "all-to-all-v wrote past the received bytes\n";
  return "";
}

std::string CheckAllToAll(Communicator& comm) {
  const int n = comm.world_size();
  constexpr int64_t kBytes = 24;
  std::vector<char> send(n * kBytes), recv(n * kBytes);
  for (int p = 0; p < n; ++p) {
    for (int64_t i = 0; i < kBytes; ++i) send[p * kBytes + i] = PartByte(comm.rank(), p, i);
  }
  std::string error = Describe(comm.AllToAll(send.data(), recv.data(), kBytes), "all-to-all");
  if (!error.empty()) return error;
  for (int p = 0; p < n; ++p) {
    for (int64_t i = 0; i < kBytes; ++i) {
      if (recv[p * kBytes + i] != PartByte(p, comm.rank(), i)) {
        return absl::StrCat("all-to-all: wrong byte ", i, " from rank ", p, "\n");
      }
    }
  }
  return "";
}

// count 7 takes the one-phase path; 20011 int64 (160 KB) the reduce-scatter + all-gather path
// with chunks that do not divide evenly.
std::string CheckAllReduceInt(Communicator& comm, int64_t count, ReduceOp op) {
  std::vector<int64_t> data(count);
  for (int64_t i = 0; i < count; ++i) data[i] = IntInput(comm.rank(), i);
  std::string error = Describe(comm.AllReduce(data.data(), count, op), "all-reduce int64");
  if (!error.empty()) return error;
  for (int64_t i = 0; i < count; ++i) {
    int64_t expected = IntInput(0, i);
    for (int r = 1; r < comm.world_size(); ++r) {
      expected =
          op == ReduceOp::kSum ? expected + IntInput(r, i) : std::max(expected, IntInput(r, i));
    }
    if (data[i] != expected) {
      return absl::StrCat("all-reduce int64 count ", count, ": element ", i, " is ", data[i],
                          ", expected ", expected, "\n");
    }
  }
  return "";
}

// Float sums are folded in rank order 0..n-1 (the documented contract), so they are exact.
std::string CheckAllReduceFloat(Communicator& comm, int64_t count, ReduceOp op) {
  std::vector<float> data(count);
  for (int64_t i = 0; i < count; ++i) data[i] = FloatInput(comm.rank(), i);
  std::string error = Describe(comm.AllReduce(data.data(), count, op), "all-reduce f32");
  if (!error.empty()) return error;
  for (int64_t i = 0; i < count; ++i) {
    float expected = FloatInput(0, i);
    for (int r = 1; r < comm.world_size(); ++r) {
      expected =
          op == ReduceOp::kSum ? expected + FloatInput(r, i) : std::max(expected, FloatInput(r, i));
    }
    if (data[i] != expected) {
      return absl::StrCat("all-reduce f32 count ", count, ": element ", i, " is ", data[i],
                          ", expected ", expected, "\n");
    }
  }
  return "";
}

std::string CheckAllGather(Communicator& comm, int64_t bytes) {
  const int n = comm.world_size();
  std::vector<char> send(bytes), recv(n * bytes + 1, '\x7f');
  for (int64_t i = 0; i < bytes; ++i) send[i] = PartByte(comm.rank(), 0, i);
  std::string error = Describe(comm.AllGather(send.data(), bytes, recv.data()), "all-gather");
  if (!error.empty()) return error;
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < bytes; ++i) {
      if (recv[r * bytes + i] != PartByte(r, 0, i)) {
        return absl::StrCat("all-gather: wrong byte ", i, " of rank ", r, "\n");
      }
    }
  }
  if (recv.back() != '\x7f') return "all-gather wrote past the end\n";
  return "";
}

std::string CheckBroadcast(Communicator& comm, int root, int64_t bytes) {
  std::vector<char> data(bytes);
  for (int64_t i = 0; i < bytes; ++i) {
    data[i] = comm.rank() == root ? PartByte(root, 9, i) : '\0';
  }
  std::string error = Describe(comm.Broadcast(data.data(), bytes, root), "broadcast");
  if (!error.empty()) return error;
  for (int64_t i = 0; i < bytes; ++i) {
    if (data[i] != PartByte(root, 9, i)) {
      return absl::StrCat("broadcast from ", root, ": wrong byte ", i, "\n");
    }
  }
  return "";
}

std::string RunAllCollectives(int world_size, int rank, int port) {
  auto comm = ConnectGloo(Options(world_size, rank, port, milliseconds(10000)));
  if (!comm.ok()) return Describe(comm.status(), "connect");
  Communicator& c = **comm;
  if (c.rank() != rank || c.world_size() != world_size || c.backend() != "gloo") {
    return "wrong rank, world_size or backend\n";
  }
  std::string errors;
  errors += CheckAllToAllV(c);
  errors += CheckAllToAll(c);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    errors += CheckAllReduceInt(c, 7, op);
    errors += CheckAllReduceInt(c, 20011, op);
    errors += CheckAllReduceFloat(c, 5, op);
    errors += CheckAllReduceFloat(c, 40009, op);
  }
  errors += CheckAllReduceInt(c, 0, ReduceOp::kSum);
  errors += CheckAllGather(c, 13);
  errors += CheckAllGather(c, 0);
  for (int root = 0; root < world_size; ++root) errors += CheckBroadcast(c, root, 1000);
  errors += CheckBroadcast(c, world_size - 1, 0);
  errors += Describe(c.Barrier(), "barrier");
  errors += CheckAllToAllV(c);  // again: sequence numbers and slots keep calls apart
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
