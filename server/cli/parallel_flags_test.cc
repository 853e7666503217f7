#include "server/cli/parallel_flags.h"

#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata::cli {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<ParallelOptions> Resolve(const std::vector<std::string>& args,
                                        const std::map<std::string, std::string>& env = {}) {
  absl::StatusOr<Flags> flags = Flags::Parse(args, ParallelFlagSpecs());
  if (!flags.ok()) return flags.status();
  return ParallelOptionsFromFlags(*flags, [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

TEST(ParallelFlagsTest, DefaultIsOneRankWithoutNetwork) {
  auto p = Resolve({});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->world_size, 1);
  EXPECT_EQ(p->local_ranks, 1);
  EXPECT_EQ(p->first_rank, 0);
  EXPECT_FALSE(p->multi_rank());
  EXPECT_EQ(p->coordinator, "");
  EXPECT_EQ(p->collective_timeout, std::chrono::seconds(60));
}

TEST(ParallelFlagsTest, OneRankPerProcess) {
  auto p = Resolve({"--world-size", "4", "--rank", "3", "--coordinator", "10.0.0.1:5000",
                    "--collective-timeout-s", "5"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->world_size, 4);
  EXPECT_EQ(p->num_nodes, 4);
  EXPECT_EQ(p->node_rank, 3);
  EXPECT_EQ(p->first_rank, 3);
  EXPECT_EQ(p->local_ranks, 1);
  EXPECT_EQ(p->coordinator, "10.0.0.1:5000");
  EXPECT_EQ(p->collective_timeout, std::chrono::seconds(5));
}

TEST(ParallelFlagsTest, LocalRanksTimesNodesIsTheWorld) {
  auto p = Resolve({"--local-ranks", "4", "--node-rank", "1", "--num-nodes", "2", "--coordinator",
                    "leader:29500"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->world_size, 8);
  EXPECT_EQ(p->first_rank, 4);  // ranks 4..7
  EXPECT_EQ(p->local_ranks, 4);
}

TEST(ParallelFlagsTest, OneProcessWithSeveralRanksUsesLoopbackCoordinator) {
  auto p = Resolve({"--local-ranks", "2"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->world_size, 2);
  EXPECT_EQ(p->coordinator, "127.0.0.1:29500");
  p = Resolve({"--local-ranks", "2", "--coordinator-port", "4100"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->coordinator, "127.0.0.1:4100");
}

TEST(ParallelFlagsTest, LeaderWorkerSetEnvironmentGivesDefaults) {
  const std::map<std::string, std::string> env = {
      {"LWS_LEADER_ADDRESS", "lws-0.lws.ns"}, {"LWS_WORKER_INDEX", "2"}, {"LWS_GROUP_SIZE", "3"}};
  auto p = Resolve({"--local-ranks", "2"}, env);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->world_size, 6);
  EXPECT_EQ(p->num_nodes, 3);
  EXPECT_EQ(p->node_rank, 2);
  EXPECT_EQ(p->first_rank, 4);
  EXPECT_EQ(p->coordinator, "lws-0.lws.ns:29500");
  // Flags win over the environment.
  p = Resolve({"--node-rank", "0", "--coordinator", "x:1", "--coordinator-port", "7"}, env);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->node_rank, 0);
  EXPECT_EQ(p->world_size, 3);
  EXPECT_EQ(p->coordinator, "x:1");
}

TEST(ParallelFlagsTest, ReplicasAreEngineLoopsWithoutAGroup) {
  auto p = Resolve({"--replicas", "3"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->replicas, 3);
  EXPECT_EQ(p->world_size, 1);
  EXPECT_FALSE(p->multi_rank());
  EXPECT_EQ(p->coordinator, "");
  EXPECT_EQ(p->num_engine_ranks(), 3);
  auto group = Resolve({"--local-ranks", "2"});
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(group->num_engine_ranks(), 2);
  EXPECT_EQ(Resolve({})->num_engine_ranks(), 1);
}

TEST(ParallelFlagsTest, InconsistentValuesNameTheLimit) {
  EXPECT_THAT(Resolve({"--replicas", "2", "--local-ranks", "2"}).status().message(),
              HasSubstr("--replicas 2 copies the whole model per engine loop; it cannot be "
                        "combined with --world-size 2"));
  EXPECT_THAT(Resolve({"--replicas", "0"}).status().message(), HasSubstr("--replicas"));
  EXPECT_THAT(
      Resolve({"--world-size", "2", "--rank", "2", "--coordinator", "h:1"}).status().message(),
      HasSubstr("--rank 2 must be < --world-size 2"));
  EXPECT_THAT(Resolve({"--world-size", "3", "--local-ranks", "2"}).status().message(),
              HasSubstr("--world-size 3 must be a multiple of --local-ranks 2"));
  EXPECT_THAT(
      Resolve({"--world-size", "4", "--num-nodes", "3", "--local-ranks", "2"}).status().message(),
      HasSubstr("does not match --num-nodes 3 × --local-ranks 2 = 6"));
  EXPECT_THAT(
      Resolve({"--num-nodes", "2", "--node-rank", "2", "--coordinator", "h:1"}).status().message(),
      HasSubstr("--node-rank 2 must be < the number of nodes 2"));
  EXPECT_THAT(
      Resolve({}, {{"LWS_GROUP_SIZE", "2"}, {"LWS_WORKER_INDEX", "5"}, {"LWS_LEADER_ADDRESS", "h"}})
          .status()
          .message(),
      HasSubstr("LWS_WORKER_INDEX 5 must be < the number of nodes 2"));
  EXPECT_THAT(Resolve({"--world-size", "2", "--rank", "1"}).status().message(),
              HasSubstr("needs --coordinator host:port"));
  EXPECT_THAT(Resolve({"--world-size", "2", "--coordinator", "nohost"}).status().message(),
              HasSubstr("--coordinator must be host:port"));
  EXPECT_THAT(Resolve({"--local-ranks", "2", "--rank", "1"}).status().message(),
              HasSubstr("--rank 1 must be a multiple of --local-ranks 2"));
  EXPECT_THAT(Resolve({}, {{"LWS_GROUP_SIZE", "two"}}).status().message(),
              HasSubstr("LWS_GROUP_SIZE must be an integer"));
  EXPECT_THAT(Resolve({"--collective-timeout-s", "0"}).status().message(),
              HasSubstr("--collective-timeout-s"));
}

// A ported `vllm serve` line: vLLM's data-parallel flags mean Strata's.
TEST(ParallelFlagsTest, VllmDataParallelFlagsMapOntoRanks) {
  // One node: every rank local (vLLM's default for --data-parallel-size alone).
  auto one = Resolve({"--data-parallel-size", "8", "--enable-expert-parallel"});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->world_size, 8);
  EXPECT_EQ(one->local_ranks, 8);
  EXPECT_EQ(one->num_nodes, 1);
  EXPECT_EQ(one->coordinator, "127.0.0.1:29500");
  EXPECT_TRUE(one->coordinator_defaulted);  // `strata serve` takes an ephemeral port instead
  auto port = Resolve({"--local-ranks", "2", "--coordinator-port", "29600"});
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(port->coordinator, "127.0.0.1:29600");
  EXPECT_FALSE(port->coordinator_defaulted);
  // Kimi K2's two-node line, second node.
  auto second = Resolve({"--data-parallel-size", "16", "--data-parallel-size-local", "8",
                         "--data-parallel-start-rank", "8", "--data-parallel-address", "10.0.0.1",
                         "--data-parallel-rpc-port", "12345"});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->world_size, 16);
  EXPECT_EQ(second->local_ranks, 8);
  EXPECT_EQ(second->num_nodes, 2);
  EXPECT_EQ(second->node_rank, 1);
  EXPECT_EQ(second->first_rank, 8);
  EXPECT_EQ(second->coordinator, "10.0.0.1:12345");
  EXPECT_FALSE(second->coordinator_defaulted);
  auto default_port = Resolve({"--data-parallel-size", "4", "--data-parallel-size-local", "2",
                               "--data-parallel-address", "leader"});
  ASSERT_TRUE(default_port.ok()) << default_port.status();
  EXPECT_EQ(default_port->coordinator, "leader:29550");  // vLLM's default rpc port
}

// Data parallelism over tensor-parallel groups: a world of D x T ranks, groups of T consecutive
// ranks; vLLM's data-parallel flags count groups.
TEST(ParallelFlagsTest, DataParallelGroupsOfTensorParallelRanks) {
  auto vllm = Resolve({"--tensor-parallel-size", "2", "--data-parallel-size", "2"});
  ASSERT_TRUE(vllm.ok()) << vllm.status();
  EXPECT_EQ(vllm->world_size, 4);
  EXPECT_EQ(vllm->local_ranks, 4);
  EXPECT_EQ(vllm->data_parallel_size(), 2);
  EXPECT_TRUE(vllm->data_parallel_groups());
  EXPECT_EQ(vllm->num_engine_ranks(), 2);  // the groups' leads
  // vLLM's two-node TP8 x DP4 line, second node: two groups here, global ranks 16..31.
  auto node = Resolve({"--tp-size", "8", "--data-parallel-size", "4", "--data-parallel-size-local",
                       "2", "--data-parallel-start-rank", "2", "--data-parallel-address", "h"});
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->world_size, 32);
  EXPECT_EQ(node->local_ranks, 16);
  EXPECT_EQ(node->first_rank, 16);
  EXPECT_EQ(node->num_engine_ranks(), 2);
  // One process per rank: ranks 0 and 2 lead, 1 and 3 follow.
  for (int rank : {0, 1, 2, 3}) {
    auto p = Resolve({"--tensor-parallel-size", "2", "--world-size", "4", "--rank",
                      std::to_string(rank), "--coordinator", "h:1"});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->leads_tensor_parallel_group(), rank % 2 == 0) << rank;
    EXPECT_EQ(p->num_engine_ranks(), rank % 2 == 0 ? 1 : 0) << rank;
  }
  // A group of one rank per process is not data parallelism over groups.
  auto one_group = Resolve({"--tensor-parallel-size", "4"});
  ASSERT_TRUE(one_group.ok()) << one_group.status();
  EXPECT_FALSE(one_group->data_parallel_groups());

  auto uneven = Resolve(
      {"--tensor-parallel-size", "2", "--world-size", "3", "--rank", "0", "--coordinator", "h:1"});
  ASSERT_FALSE(uneven.ok());
  EXPECT_THAT(uneven.status().message(),
              HasSubstr("a world of 3 ranks cannot be cut into tensor-parallel groups of "
                        "--tensor-parallel-size 2"));
  auto straddle = Resolve({"--tensor-parallel-size", "4", "--world-size", "12", "--local-ranks",
                           "6", "--coordinator", "h:1"});
  ASSERT_FALSE(straddle.ok());
  EXPECT_THAT(straddle.status().message(),
              HasSubstr("6 ranks per process with --tensor-parallel-size 4: a process runs whole "
                        "tensor-parallel groups or a part of one"));
}

TEST(ParallelFlagsTest, VllmAliasesAreRefusedNamingTheFlagsGiven) {
  auto both = Resolve({"--world-size", "4", "--data-parallel-size", "4"});
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(both.status().message(), HasSubstr("--world-size and --data-parallel-size"));
  auto rank = Resolve({"--data-parallel-size", "4", "--data-parallel-size-local", "2",
                       "--data-parallel-start-rank", "1", "--data-parallel-address", "a"});
  ASSERT_FALSE(rank.ok());
  EXPECT_THAT(rank.status().message(),
              HasSubstr("--data-parallel-start-rank 1 must be a multiple of "
                        "--data-parallel-size-local 2"));
  auto addresses =
      Resolve({"--local-ranks", "2", "--coordinator", "a:1", "--data-parallel-address", "b"});
  ASSERT_FALSE(addresses.ok());
  EXPECT_THAT(addresses.status().message(), HasSubstr("give one"));
  auto port_alone = Resolve({"--local-ranks", "2", "--data-parallel-rpc-port", "5"});
  ASSERT_FALSE(port_alone.ok());
  EXPECT_THAT(port_alone.status().message(), HasSubstr("give both"));
}

}  // namespace
}  // namespace strata::cli
