#include "dist/testing/fake_communicator.h"

#include <functional>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata::dist::testing {
namespace {

using ::testing::HasSubstr;

// Runs fn(rank, comm) on one thread per rank and joins them.
void OnAllRanks(FakeGroup& group, const std::function<void(int, Communicator*)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < group.world_size(); ++r) {
    threads.emplace_back([&, r] { fn(r, group.rank(r)); });
  }
  for (auto& t : threads) t.join();
}

TEST(FakeCommunicatorTest, AllToAllVDeliversEachPartToItsRankInRankOrder) {
  constexpr int kWorld = 3;
  FakeGroup group(kWorld);
  // Rank s sends (s + r) bytes of value 10·s + r to rank r.
  std::vector<std::vector<char>> received(kWorld);
  OnAllRanks(group, [&](int rank, Communicator* comm) {
    std::vector<int64_t> send_bytes(kWorld), recv_bytes(kWorld);
    std::vector<char> send;
    for (int r = 0; r < kWorld; ++r) {
      send_bytes[r] = rank + r;
      recv_bytes[r] = r + rank;
      send.insert(send.end(), static_cast<size_t>(rank + r), static_cast<char>(10 * rank + r));
    }
    std::vector<char> recv(static_cast<size_t>(3 * rank + 3));
    ASSERT_TRUE(
        comm->AllToAllV(send.data(), send_bytes.data(), recv.data(), recv_bytes.data()).ok());
    received[static_cast<size_t>(rank)] = recv;
  });
  for (int r = 0; r < kWorld; ++r) {
    std::vector<char> expected;
    for (int s = 0; s < kWorld; ++s) {
      expected.insert(expected.end(), static_cast<size_t>(s + r), static_cast<char>(10 * s + r));
    }
    EXPECT_EQ(received[static_cast<size_t>(r)], expected) << "rank " << r;
  }
}

TEST(FakeCommunicatorTest, FixedSizeCollectivesMatchTheirDefinitions) {
  constexpr int kWorld = 4;
  FakeGroup group(kWorld);
  OnAllRanks(group, [&](int rank, Communicator* comm) {
    EXPECT_EQ(comm->rank(), rank);
    EXPECT_EQ(comm->world_size(), kWorld);
    std::vector<int64_t> send(kWorld), recv(kWorld);
    for (int r = 0; r < kWorld; ++r) send[r] = 100 * rank + r;
    ASSERT_TRUE(comm->AllToAll(send.data(), recv.data(), sizeof(int64_t)).ok());
    for (int s = 0; s < kWorld; ++s) EXPECT_EQ(recv[s], 100 * s + rank);

    int64_t ints[2] = {rank, 10 - rank};
    ASSERT_TRUE(comm->AllReduce(ints, 2, ReduceOp::kSum).ok());
    EXPECT_EQ(ints[0], 0 + 1 + 2 + 3);
    EXPECT_EQ(ints[1], 40 - 6);
    float floats[1] = {static_cast<float>(rank) * 0.5f};
    ASSERT_TRUE(comm->AllReduce(floats, 1, ReduceOp::kMax).ok());
    EXPECT_EQ(floats[0], 1.5f);

    int32_t mine = rank * 7;
    std::vector<int32_t> all(kWorld);
    ASSERT_TRUE(comm->AllGather(&mine, sizeof(mine), all.data()).ok());
    EXPECT_EQ(all, (std::vector<int32_t>{0, 7, 14, 21}));

    int64_t value = rank == 2 ? 42 : -1;
    ASSERT_TRUE(comm->Broadcast(&value, sizeof(value), 2).ok());
    EXPECT_EQ(value, 42);
    EXPECT_TRUE(comm->Barrier().ok());
  });
}

TEST(FakeCommunicatorTest, MismatchedCollectivesFailOnEveryRank) {
  FakeGroup group(2);
  std::vector<absl::Status> status(2);
  OnAllRanks(group, [&](int rank, Communicator* comm) {
    int64_t x = 1;
    status[static_cast<size_t>(rank)] =
        rank == 0 ? comm->AllReduce(&x, 1, ReduceOp::kSum) : comm->Barrier();
  });
  for (const auto& s : status) {
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("rank 1 called barrier"));
  }
}

TEST(FakeCommunicatorTest, DisagreeingAllToAllVCountsFailOnEveryRank) {
  FakeGroup group(2);
  std::vector<absl::Status> status(2);
  OnAllRanks(group, [&](int rank, Communicator* comm) {
    char send[8] = {}, recv[8] = {};
    // Every rank sends 1 byte to rank 0 and 2 to rank 1; rank 1 wrongly expects 3 from itself.
    const int64_t send_bytes[2] = {1, 2};
    const int64_t recv_bytes[2] = {rank + 1, rank == 1 ? 3 : 1};
    status[static_cast<size_t>(rank)] = comm->AllToAllV(send, send_bytes, recv, recv_bytes);
  });
  for (const auto& s : status) {
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("rank 1 sends 2 bytes to rank 1, which expects 3"));
  }
}

TEST(FakeCommunicatorTest, AMissingRankTimesOutNamingItAndBreaksTheGroup) {
  FakeGroup group(3, std::chrono::milliseconds(100));
  std::vector<absl::Status> status(3);
  OnAllRanks(group, [&](int rank, Communicator* comm) {
    if (rank == 2) return;  // never arrives
    status[static_cast<size_t>(rank)] = comm->Barrier();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(status[static_cast<size_t>(r)].ok());
    EXPECT_THAT(status[static_cast<size_t>(r)].message(),
                HasSubstr("barrier (collective #0): rank 2 did not answer within 100 ms"));
  }
  // Unusable afterwards, for every rank.
  EXPECT_FALSE(group.rank(2)->Barrier().ok());
  EXPECT_FALSE(group.rank(0)->Barrier().ok());
}

}  // namespace
}  // namespace strata::dist::testing
