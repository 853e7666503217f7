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
  auto default_port = Resolve({"--data-parallel-size", "4", "--data-parallel-size-local", "2",
                               "--data-parallel-address", "leader"});
  ASSERT_TRUE(default_port.ok()) << default_port.status();
  EXPECT_EQ(default_port->coordinator, "leader:29550");  // vLLM's default rpc port
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
