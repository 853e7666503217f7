// Shared-memory communicator tests. Every group runs twice: ranks as forked processes
// (fork_ranks_test_util.h) and ranks as threads of the test process (each thread connects with
// the same coordinator, as engine threads do). Expected results are computed independently in
// each rank from the known inputs of all ranks. A small buffer (4 KiB per rank) makes most
// messages go in several rounds.
#include "dist/shm_communicator.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
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

constexpr int64_t kSmallBufferBytes = 4096;

enum class Mode { kProcesses, kThreads };

void PrintTo(Mode mode, std::ostream* os) {
  *os << (mode == Mode::kProcesses ? "processes" : "threads");
}

// A group name no other test (or earlier run) uses: the segment name starts with it.
std::string UniqueGroup(absl::string_view test) {
  static std::atomic<int> counter{0};
  return absl::StrCat("shmtest-", test, "-", ::getpid(), "-", counter++);
}

// Entries of /dev/shm whose name starts with the segment prefix of `group`.
std::vector<std::string> LeftoverSegments(const std::string& group) {
  std::vector<std::string> found;
  const std::string prefix = absl::StrCat("strata-shm-", group, "-");
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return found;
  while (const dirent* entry = ::readdir(dir)) {
    if (absl::StartsWith(entry->d_name, prefix)) found.push_back(entry->d_name);
  }
  ::closedir(dir);
  return found;
}

RendezvousOptions Options(int world_size, int rank, int port, const std::string& group,
                          milliseconds timeout) {
  RendezvousOptions options = testing::LoopbackOptions(world_size, rank, port, group);
  options.connect_timeout = milliseconds(10000);
  options.timeout = timeout;
  return options;
}

// Runs body(rank) for every rank, as processes or as threads; "" from a rank means success.
std::vector<RankReport> RunRanks(Mode mode, int world_size,
                                 const std::function<std::string(int rank)>& body) {
  if (mode == Mode::kProcesses) return ForkRanks(world_size, body);
  std::vector<RankReport> reports(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      reports[r].rank = r;
      reports[r].message = body(r);
      reports[r].ok = reports[r].message.empty();
    });
  }
  for (std::thread& thread : threads) thread.join();
  return reports;
}

void ExpectAllOk(const std::vector<RankReport>& reports, int world_size) {
  ASSERT_EQ(reports.size(), static_cast<size_t>(world_size));
  for (const RankReport& report : reports) {
    EXPECT_TRUE(report.ok) << "rank " << report.rank << ": " << report.message;
  }
}

std::string RunAllCollectives(int world_size, int rank, int port, const std::string& group,
                              int64_t buffer_bytes) {
  auto comm = ConnectSharedMemory(Options(world_size, rank, port, group, milliseconds(10000)),
                                  buffer_bytes);
  if (!comm.ok()) return Describe(comm.status(), "connect");
  Communicator& c = **comm;
  if (c.rank() != rank || c.world_size() != world_size || c.backend() != "shm") {
    return "wrong rank, world_size or backend\n";
  }
  std::string errors;
  // The name is unlinked as soon as every rank has mapped the segment.
  if (!LeftoverSegments(group).empty()) errors += "segment name still in /dev/shm\n";
  errors += testing::CheckEveryCollective(c);
  return errors;
}

struct GroupParam {
  Mode mode;
  int world_size;
  int64_t buffer_bytes = kSmallBufferBytes;
};

void PrintTo(const GroupParam& param, std::ostream* os) {
  PrintTo(param.mode, os);
  *os << " x" << param.world_size << ", " << param.buffer_bytes << " bytes per rank";
}

class ShmCollectivesTest : public ::testing::TestWithParam<GroupParam> {};

TEST_P(ShmCollectivesTest, EveryCollectiveMatchesIndependentResult) {
  const GroupParam param = GetParam();
  const int port = FreePort();
  const std::string group = UniqueGroup("collectives");
  ExpectAllOk(RunRanks(param.mode, param.world_size,
                       [&](int rank) {
                         return RunAllCollectives(param.world_size, rank, port, group,
                                                  param.buffer_bytes);
                       }),
              param.world_size);
  EXPECT_TRUE(LeftoverSegments(group).empty());
}

std::string ParamName(const ::testing::TestParamInfo<GroupParam>& info) {
  return absl::StrCat(info.param.mode == Mode::kProcesses ? "Processes" : "Threads", "World",
                      info.param.world_size,
                      info.param.buffer_bytes == kSmallBufferBytes ? "" : "DefaultBuffer");
}

INSTANTIATE_TEST_SUITE_P(
    Groups, ShmCollectivesTest,
    ::testing::Values(GroupParam{Mode::kProcesses, 1}, GroupParam{Mode::kProcesses, 2},
                      GroupParam{Mode::kProcesses, 3}, GroupParam{Mode::kProcesses, 4},
                      GroupParam{Mode::kProcesses, 5}, GroupParam{Mode::kThreads, 2},
                      GroupParam{Mode::kThreads, 3}, GroupParam{Mode::kThreads, 4},
                      // 8 MiB per rank: every message of the test fits in one round.
                      GroupParam{Mode::kProcesses, 3, 8 << 20},
                      GroupParam{Mode::kThreads, 2, 8 << 20}),
    ParamName);

class ShmFailureTest : public ::testing::TestWithParam<Mode> {};

// Ranks 0 and 1 call an all-reduce that rank 2 never joins: both name rank 2 within the
// timeout (one directly, the other possibly through the segment's abort record) and refuse
// later calls.
TEST_P(ShmFailureTest, SilentRankIsNamedWithinTimeout) {
  const int port = FreePort();
  const std::string group = UniqueGroup("silent");
  const auto reports = RunRanks(GetParam(), 3, [&](int rank) -> std::string {
    auto comm =
        ConnectSharedMemory(Options(3, rank, port, group, milliseconds(500)), kSmallBufferBytes);
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
        !absl::StartsWith(status.message(), "all-reduce (shm collective #1): ") ||
        !absl::StrContains(status.message(), "rank 2 did not answer within 500 ms")) {
      errors += absl::StrCat("unexpected status: ", status.ToString(), "\n");
    }
    if (elapsed < milliseconds(400) || elapsed > milliseconds(1400)) {
      errors += absl::StrCat("failed after ", elapsed.count(), " ms, limit 500 ms\n");
    }
    const absl::Status again = (*comm)->Barrier();
    if (again.code() != absl::StatusCode::kFailedPrecondition ||
        !absl::StrContains(again.message(), "unusable after an earlier error")) {
      errors += absl::StrCat("call after the error: ", again.ToString(), "\n");
    }
    return errors;
  });
  ExpectAllOk(reports, 3);
  EXPECT_TRUE(LeftoverSegments(group).empty());
}

// Rank 1 leaves after the first barrier (processes: _exit without cleanup; threads: the
// communicator is destroyed); the others' next collective fails quickly naming rank 1.
TEST_P(ShmFailureTest, DepartedRankIsNamedQuickly) {
  const Mode mode = GetParam();
  const int port = FreePort();
  const std::string group = UniqueGroup("departed");
  const auto reports = RunRanks(mode, 4, [&](int rank) -> std::string {
    auto comm =
        ConnectSharedMemory(Options(4, rank, port, group, milliseconds(20000)), kSmallBufferBytes);
    if (!comm.ok()) return Describe(comm.status(), "connect");
    if (!(*comm)->Barrier().ok()) return "first barrier failed\n";
    if (rank == 1) {
      if (mode == Mode::kProcesses) ::_exit(0);  // no goodbye
      comm->reset();
      std::this_thread::sleep_for(milliseconds(500));  // keeps rank 0's store up meanwhile
      return "";
    }
    std::vector<char> send(4 * 64, 'x'), recv(4 * 64);
    const auto start = Clock::now();
    const absl::Status status = (*comm)->AllToAll(send.data(), recv.data(), 64);
    const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    const std::string expected =
        mode == Mode::kProcesses ? "rank 1 exited (process " : "rank 1 closed its communicator";
    std::string errors;
    if (status.code() != absl::StatusCode::kUnavailable ||
        !absl::StartsWith(status.message(), "all-to-all (shm collective #2): ") ||
        !absl::StrContains(status.message(), expected)) {
      errors += absl::StrCat("unexpected status: ", status.ToString(), "\n");
    }
    if (elapsed > milliseconds(3000)) errors += absl::StrCat("took ", elapsed.count(), " ms\n");
    return errors;
  });
  ExpectAllOk(reports, 4);
  EXPECT_TRUE(LeftoverSegments(group).empty());
}

// Each rank's report for a collective where ranks disagree: `call(rank, comm)` must fail with
// INVALID_ARGUMENT whose message contains expected(rank).
void ExpectDisagreement(Mode mode, int world_size,
                        const std::function<absl::Status(int, Communicator&)>& call,
                        const std::function<std::string(int)>& expected) {
  const int port = FreePort();
  const std::string group = UniqueGroup("disagree");
  const auto reports = RunRanks(mode, world_size, [&](int rank) -> std::string {
    auto comm =
        ConnectSharedMemory(Options(world_size, rank, port, group, milliseconds(5000)), 8192);
    if (!comm.ok()) return Describe(comm.status(), "connect");
    const absl::Status status = call(rank, **comm);
    if (status.code() != absl::StatusCode::kInvalidArgument ||
        !absl::StrContains(status.message(), expected(rank))) {
      return absl::StrCat("unexpected status: ", status.ToString(), " (expected '", expected(rank),
                          "')\n");
    }
    return "";
  });
  ExpectAllOk(reports, world_size);
}

TEST_P(ShmFailureTest, DifferentCollectivesAreReportedNotMixed) {
  ExpectDisagreement(
      GetParam(), 2,
      [](int rank, Communicator& comm) {
        std::vector<float> data(4, 1.0f);
        return rank == 0 ? comm.AllReduce(data.data(), 4, ReduceOp::kSum)
                         : comm.Broadcast(data.data(), 16, 0);
      },
      [](int rank) -> std::string {
        return rank == 0 ? "all-reduce (shm collective #1): rank 1 is in broadcast(root 0) #1"
                         : "broadcast (shm collective #1): rank 0 is in all-reduce(sum, f32) #1";
      });
}

TEST_P(ShmFailureTest, DifferentAllReduceSizesAreReported) {
  ExpectDisagreement(
      GetParam(), 3,
      [](int rank, Communicator& comm) {
        std::vector<float> data(100000, 1.0f);  // several rounds: nothing may be exchanged
        return comm.AllReduce(data.data(), rank == 1 ? 100000 : 4, ReduceOp::kSum);
      },
      [](int rank) -> std::string {
        return rank == 1 ? "rank 0 passes 4 elements but this rank passes 100000"
                         : "rank 1 passes 100000 elements but this rank passes 4";
      });
}

TEST_P(ShmFailureTest, DisagreeingCountsAreReportedOnEveryRank) {
  ExpectDisagreement(
      GetParam(), 3,
      [](int rank, Communicator& comm) {
        // Rank 0 sends 8 bytes to rank 1, which expects 4; rank 2 agrees with everyone.
        const int64_t send_bytes[3] = {0, rank == 0 ? 8 : 0, 0};
        const int64_t recv_bytes[3] = {rank == 1 ? 4 : 0, 0, 0};
        char send[8] = {}, recv[8] = {};
        return comm.AllToAllV(send, send_bytes, recv, recv_bytes);
      },
      [](int) -> std::string {
        return "rank 0 sends 8 bytes to rank 1, which expects 4 (send and receive counts "
               "disagree)";
      });
}

INSTANTIATE_TEST_SUITE_P(Modes, ShmFailureTest, ::testing::Values(Mode::kProcesses, Mode::kThreads),
                         [](const auto& info) {
                           return info.param == Mode::kProcesses ? "Processes" : "Threads";
                         });

TEST(ShmCommunicatorTest, WorldSizeOneNeedsNoCoordinatorOrSegment) {
  RendezvousOptions options;
  options.coordinator = "";  // never parsed: a single rank creates nothing
  auto comm = ConnectSharedMemory(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->backend(), "shm");
  std::vector<float> data = {1.5f, -2.0f};
  ASSERT_TRUE((*comm)->AllReduce(data.data(), 2, ReduceOp::kSum).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  const int64_t bytes[1] = {3};
  const char send[3] = {'a', 'b', 'c'};
  char recv[3] = {};
  ASSERT_TRUE((*comm)->AllToAllV(send, bytes, recv, bytes).ok());
  EXPECT_EQ(std::string(recv, 3), "abc");
  char gathered[3] = {};
  ASSERT_TRUE((*comm)->AllGather(send, 3, gathered).ok());
  EXPECT_EQ(std::string(gathered, 3), "abc");
  EXPECT_TRUE((*comm)->Barrier().ok());
}

TEST(ShmCommunicatorTest, InvalidArgumentsAreRejectedAndFailTheCommunicator) {
  RendezvousOptions options;
  auto comm = ConnectSharedMemory(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  int64_t value = 0;
  const absl::Status negative = (*comm)->AllReduce(&value, -1, ReduceOp::kSum);
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(negative.message(), "count is -1 (must be >= 0)")) << negative;
  const absl::Status again = (*comm)->Barrier();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;

  auto fresh = ConnectSharedMemory(options);
  ASSERT_TRUE(fresh.ok());
  const absl::Status null = (*fresh)->AllGather(nullptr, 8, &value);
  EXPECT_EQ(null.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(null.message(), "null buffer with 8 bytes")) << null;

  auto root = ConnectSharedMemory(options);
  ASSERT_TRUE(root.ok());
  const absl::Status bad_root = (*root)->Broadcast(&value, 8, 1);
  EXPECT_EQ(bad_root.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad_root.message(), "root 1 is outside world_size 1")) << bad_root;
}

TEST(ShmCommunicatorTest, BufferSizeOutsideLimitsIsRejected) {
  RendezvousOptions options;
  auto small = ConnectSharedMemory(options, 1000);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(small.status().message(),
                                "buffer_bytes_per_rank 1000 is outside [4096, 1073741824]"))
      << small.status();
  options.world_size = 65;
  auto many = ConnectSharedMemory(options);
  ASSERT_FALSE(many.ok());
  EXPECT_TRUE(absl::StrContains(many.status().message(), "exceeds the limit of 64"))
      << many.status();
}

// Rank 1 never connects: rank 0 fails within connect_timeout and removes the segment name.
TEST(ShmCommunicatorTest, MissingRankAtConnectLeavesNoSegment) {
  const int port = FreePort();
  const std::string group = UniqueGroup("connect");
  RendezvousOptions options = Options(2, 0, port, group, milliseconds(500));
  options.connect_timeout = milliseconds(500);
  auto comm = ConnectSharedMemory(options, kSmallBufferBytes);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_TRUE(absl::StrContains(comm.status().message(), "rank 1 did not arrive at 'shm/mapped'"))
      << comm.status();
  EXPECT_TRUE(LeftoverSegments(group).empty());
}

// Ranks disagreeing on the buffer size fail at connect with a message naming both sizes.
TEST(ShmCommunicatorTest, DifferentBufferSizesAreReportedAtConnect) {
  const int port = FreePort();
  const std::string group = UniqueGroup("buffers");
  const auto reports = ForkRanks(2, [&](int rank) -> std::string {
    RendezvousOptions options = Options(2, rank, port, group, milliseconds(1000));
    options.connect_timeout = milliseconds(1000);
    auto comm = ConnectSharedMemory(options, rank == 0 ? 8192 : 4096);
    if (comm.ok()) return "connected despite different buffer sizes\n";
    if (rank == 1 &&
        !absl::StrContains(comm.status().message(),
                           "rank 1 asked for world_size 2 and buffer_bytes_per_rank 4096, but "
                           "rank 0 created the segment for world_size 2 and "
                           "buffer_bytes_per_rank 8192")) {
      return absl::StrCat("unexpected status: ", comm.status().ToString(), "\n");
    }
    return "";
  });
  ExpectAllOk(reports, 2);
  EXPECT_TRUE(LeftoverSegments(group).empty());
}

}  // namespace
}  // namespace strata::dist
