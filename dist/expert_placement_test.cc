#include "dist/expert_placement.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata::dist {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Lists = std::vector<std::vector<int>>;

TEST(EvenPlacementTest, SevenExpertsOnTwoRanksSplitFourThree) {
  const ExpertPlacement p = EvenPlacement(7, 2);
  EXPECT_EQ(p.num_experts, 7);
  EXPECT_EQ(p.world_size, 2);
  EXPECT_EQ(p.local, (Lists{{0, 1, 2, 3}, {4, 5, 6}}));
  EXPECT_EQ(p.replicas, (Lists{{0}, {0}, {0}, {0}, {1}, {1}, {1}}));
  EXPECT_EQ(p.num_copies(), 7);
}

TEST(EvenPlacementTest, RemainderGoesToTheFirstRanks) {
  EXPECT_EQ(EvenPlacement(8, 3).local, (Lists{{0, 1, 2}, {3, 4, 5}, {6, 7}}));
  EXPECT_EQ(EvenPlacement(8, 4).local, (Lists{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(EvenPlacement(4, 4).local, (Lists{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(EvenPlacement(5, 1).local, (Lists{{0, 1, 2, 3, 4}}));
}

TEST(EvenPlacementTest, MoreRanksThanExpertsLeavesRanksEmpty) {
  const ExpertPlacement p = EvenPlacement(2, 4);
  EXPECT_EQ(p.local, (Lists{{0}, {1}, {}, {}}));
}

TEST(ExpertPlacementTest, RankForPrefersTheOriginsOwnReplica) {
  // Expert 1 on ranks 0 and 2; expert 0 only on rank 1.
  auto p = PlacementFromReplicas({{1}, {0, 2}}, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  for (int64_t row = 0; row < 5; ++row) {
    EXPECT_EQ(p->RankFor(0, 0, row), 1);
    EXPECT_EQ(p->RankFor(1, 0, row), 0);
    EXPECT_EQ(p->RankFor(1, 2, row), 2);
  }
  EXPECT_TRUE(p->Holds(2, 1));
  EXPECT_FALSE(p->Holds(1, 1));
}

TEST(ExpertPlacementTest, RankForSpreadsRowsOfARankWithoutACopyOverTheReplicas) {
  auto p = PlacementFromReplicas({{0, 2}, {1}}, 3);
  ASSERT_TRUE(p.ok());
  std::map<int, int> hits;
  for (int64_t row = 0; row < 100; ++row) {
    const int r = p->RankFor(0, 1, row);
    EXPECT_EQ(r, p->RankFor(0, 1, row)) << "deterministic";
    ++hits[r];
  }
  EXPECT_EQ(hits, (std::map<int, int>{{0, 50}, {2, 50}}));
}

TEST(ExpertPlacementTest, PlacementFromReplicasRejectsBadLists) {
  EXPECT_THAT(PlacementFromReplicas({{0}, {}}, 2).status().message(),
              HasSubstr("expert 1 is on no rank"));
  EXPECT_THAT(PlacementFromReplicas({{0}, {2}}, 2).status().message(),
              HasSubstr("expert 1 on rank 2, outside [0, 2)"));
  EXPECT_THAT(PlacementFromReplicas({{1, 1}}, 2).status().message(),
              HasSubstr("expert 0 placed twice on rank 1"));
}

class LoadPlacementTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    const std::string path = ::testing::TempDir() + "/placement_" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                             ".json";
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const auto& p : paths_) std::remove(p.c_str());
  }
  std::vector<std::string> paths_;
};

TEST_F(LoadPlacementTest, EmptyObjectIsTheEvenPlacement) {
  auto p = LoadPlacement(Write("{}"), 7, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->replicas, EvenPlacement(7, 2).replicas);
}

TEST_F(LoadPlacementTest, ReplicasAddCopiesOnTopOfTheEvenSplit) {
  auto p = LoadPlacement(Write(R"({"num_experts": 8, "world_size": 4,
                                   "replicas": [{"expert": 5, "ranks": [0, 3]},
                                                {"expert": 0, "ranks": [3]}]})"),
                         8, 4);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->replicas[5], ElementsAre(0, 2, 3));
  EXPECT_THAT(p->replicas[0], ElementsAre(0, 3));
  EXPECT_EQ(p->local, (Lists{{0, 1, 5}, {2, 3}, {4, 5}, {0, 5, 6, 7}}));
  EXPECT_EQ(p->num_copies(), 11);
}

TEST_F(LoadPlacementTest, ExplicitHomeOverridesTheEvenSplit) {
  auto p = LoadPlacement(Write(R"({"home": [1, 0, 1]})"), 3, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->local, (Lists{{1}, {0, 2}}));
}

TEST_F(LoadPlacementTest, ErrorsNameTheFileTheFieldAndTheLimit) {
  struct Case {
    std::string json, message;
  };
  const std::vector<Case> cases = {
      {R"({"replicas": [{"expert": 8, "ranks": [0]}]})",
       "replicas[0].expert = 8 is outside [0, 8) (num_experts)"},
      {R"({"replicas": [{"expert": 1, "ranks": [3, 4]}]})",
       "replicas[0].ranks[1] = 4 is outside [0, 4) (world_size)"},
      {R"({"replicas": [{"expert": 1, "ranks": [0]}]})",
       "replicas[0].ranks[0] = 0: rank already holds expert 1"},
      {R"({"world_size": 3})", "world_size = 3 does not match the world_size 4"},
      {R"({"num_experts": 9})", "num_experts = 9 does not match the num_experts 8"},
      {R"({"home": [0, 1]})", "home must be an array of 8 ranks"},
      {R"({"home": [0, 0, 0, 0, 0, 0, 0, -1]})", "home[7] = -1 is outside [0, 4) (world_size)"},
      {R"({"replica": []})", "replica is not a known key"},
      {R"({"replicas": [{"expert": 1, "rank": [2]}]})", "replicas[0].rank is not a known key"},
      {R"({"replicas": [{"expert": 1}]})", "replicas[0] needs both"},
      {R"({"replicas": [{"expert": "1", "ranks": [2]}]})", "replicas[0].expert must be an integer"},
      {R"({"replicas": {}})", "replicas must be an array"},
      {R"([1, 2])", "must be a JSON object"},
      {R"({"replicas": [)", "not valid JSON"},
  };
  for (const Case& c : cases) {
    const std::string path = Write(c.json);
    auto p = LoadPlacement(path, 8, 4);
    ASSERT_FALSE(p.ok()) << c.json;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(path + ": ")) << c.json;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.message)) << c.json;
  }
}

TEST_F(LoadPlacementTest, MissingFileIsNotFound) {
  auto p = LoadPlacement(::testing::TempDir() + "/no_such_placement.json", 8, 4);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr("no_such_placement.json"));
}

TEST_F(LoadPlacementTest, PlacementToJsonRoundTrips) {
  auto original = PlacementFromReplicas({{1, 2}, {0}, {2}, {0, 1, 2}}, 3);
  ASSERT_TRUE(original.ok());
  auto loaded = LoadPlacement(Write(PlacementToJson(*original)), 4, 3);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->replicas, original->replicas);
  EXPECT_EQ(loaded->local, original->local);
}

TEST(PlaceWithReplicasTest, HottestExpertsGoToTheLeastLoadedRanks) {
  // Even split of 6 experts on 3 ranks: {0,1} {2,3} {4,5}. Loads: rank 0 = 1000 + 10,
  // rank 1 = 20 + 30, rank 2 = 40 + 500.
  const std::vector<int64_t> tokens = {1000, 10, 20, 30, 40, 500};
  const ExpertPlacement one = PlaceWithReplicas(tokens, 3, 1);
  // Expert 0 (1000 tokens) gets a copy on rank 1 (load 50, the least).
  EXPECT_EQ(one.replicas[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(one.num_copies(), 7);
  // Second replica: per-copy loads are now 0: 500, 5: 500 → expert 0 (lower id) wins ties;
  // loads: rank 0 = 510, rank 1 = 550, rank 2 = 540 → rank 2.
  const ExpertPlacement two = PlaceWithReplicas(tokens, 3, 2);
  EXPECT_EQ(two.replicas[0], (std::vector<int>{0, 1, 2}));
  // Third: expert 5 (500) is now the hottest per copy (0: 333); loads: rank 0 = 343,
  // rank 1 = 383, rank 2 = 873 → rank 0.
  const ExpertPlacement three = PlaceWithReplicas(tokens, 3, 3);
  EXPECT_EQ(three.replicas[5], (std::vector<int>{0, 2}));
  EXPECT_EQ(three.num_copies(), 9);
}

TEST(PlaceWithReplicasTest, StopsWhenEveryRankHoldsEveryExpert) {
  const ExpertPlacement p = PlaceWithReplicas({5, 1, 3}, 2, 100);
  EXPECT_EQ(p.replicas, (Lists{{0, 1}, {0, 1}, {0, 1}}));
  EXPECT_EQ(p.num_copies(), 6);
}

TEST(PlaceWithReplicasTest, ZeroReplicasIsTheEvenPlacement) {
  EXPECT_EQ(PlaceWithReplicas({1, 2, 3, 4, 5, 6, 7}, 2, 0).replicas, EvenPlacement(7, 2).replicas);
}

}  // namespace
}  // namespace strata::dist
