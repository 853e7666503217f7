// The expert-parallel exchange over real Gloo processes (fork, TCP on 127.0.0.1): each rank
// computes the one-rank reference itself (every rank can build every rank's input) and
// compares its own rows. Its own binary: ForkRanks needs a parent without threads, and the
// parent never runs a kernel (no OpenMP pool exists when it forks).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/fork_ranks_test_util.h"
#include "dist/gloo_communicator.h"
#include "dist/moe_dispatch.h"
#include "dist/testing/moe_test_util.h"
#include "engine/moe.h"
#include "engine/workspace.h"

namespace strata::dist {
namespace {

using testing::MakeInput;
using testing::MakeMoe;
using testing::RankInput;
using testing::Routing;
using testing::TinyMoe;

struct GlooCase {
  int world_size;
  std::vector<int64_t> rows;  // per rank
  bool replicas;              // expert 0 on every rank, expert 5 on ranks 0 and the last
};

void PrintTo(const GlooCase& c, std::ostream* os) {
  *os << "world " << c.world_size << (c.replicas ? " with replicas" : " even");
}

std::string RunRank(const GlooCase& c, int rank, int port) {
  constexpr int kExperts = 8, kTopK = 3;
  const TinyMoe moe = MakeMoe(kExperts, kTopK, /*latent=*/true, 31);
  ExpertPlacement placement = EvenPlacement(kExperts, c.world_size);
  if (c.replicas) {
    std::vector<std::vector<int>> replicas = placement.replicas;
    for (int r = 0; r < c.world_size; ++r) {
      for (int e : {0, 5}) {
        auto& holders = replicas[static_cast<size_t>(e)];
        const bool wanted = e == 0 || r == 0 || r == c.world_size - 1;
        if (wanted && std::find(holders.begin(), holders.end(), r) == holders.end()) {
          holders.push_back(r);
        }
      }
    }
    auto p = PlacementFromReplicas(replicas, c.world_size);
    if (!p.ok()) return std::string(p.status().message());
    placement = *p;
  }
  std::vector<RankInput> inputs;
  for (int r = 0; r < c.world_size; ++r) {
    inputs.push_back(MakeInput(moe, c.rows[static_cast<size_t>(r)], Routing::kRandom, placement,
                               50 + static_cast<uint32_t>(r)));
  }
  const RankInput all = testing::Concatenate(inputs);
  std::vector<float> expected(static_cast<size_t>(all.rows * moe.width));
  engine::Workspace ws;
  engine::MoeRunExperts(moe.cfg, moe.w, all.z.data(), all.rows, all.ids.data(), all.weights.data(),
                        expected.data(), nullptr, ws);
  int64_t first_row = 0;
  for (int r = 0; r < rank; ++r) first_row += c.rows[static_cast<size_t>(r)];

  RendezvousOptions options =
      testing::LoopbackOptions(c.world_size, rank, port, "moe-dispatch-test");
  options.connect_timeout = std::chrono::milliseconds(20000);
  options.timeout = std::chrono::milliseconds(20000);
  auto comm = ConnectGloo(options);
  if (!comm.ok()) return absl::StrCat("ConnectGloo: ", comm.status().ToString());
  ExpertParallelExchange exchange(comm->get(), placement);
  const RankInput& in = inputs[static_cast<size_t>(rank)];
  std::vector<float> routed(static_cast<size_t>(in.rows * moe.width));
  std::string errors;
  for (int layer = 0; layer < 2; ++layer) {
    std::fill(routed.begin(), routed.end(), -3.0f);
    exchange.Exchange(moe.cfg, moe.w, layer, in.z.data(), in.rows, in.ids.data(), in.weights.data(),
                      routed.data(), nullptr, ws);
    for (size_t i = 0; i < routed.size(); ++i) {
      const float want = expected[static_cast<size_t>(first_row * moe.width) + i];
      if (!(std::fabs(routed[i] - want) <= 1e-5f * std::max(1.0f, std::fabs(want)))) {
        return absl::StrCat("rank ", rank, " layer ", layer, " element ", i, ": ", routed[i],
                            " != ", want);
      }
    }
  }
  const ExpertExchangeStats stats = exchange.stats();
  if (stats.num_exchanges != 2) return absl::StrCat("num_exchanges ", stats.num_exchanges);
  return "";
}

class GlooExchangeTest : public ::testing::TestWithParam<GlooCase> {};

TEST_P(GlooExchangeTest, EqualsAllExpertsOnOneRank) {
  const GlooCase c = GetParam();
  const int port = testing::FreePort();
  const auto reports = testing::ForkRanks(
      c.world_size, [&](int rank) { return RunRank(c, rank, port); }, std::chrono::seconds(60));
  ASSERT_EQ(reports.size(), static_cast<size_t>(c.world_size));
  for (const auto& report : reports) {
    EXPECT_TRUE(report.ok) << "rank " << report.rank << ": " << report.message;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooExchangeTest,
                         ::testing::Values(GlooCase{2, {6, 9}, false}, GlooCase{3, {5, 0, 7}, true},
                                           GlooCase{4, {4, 3, 0, 8}, false},
                                           GlooCase{4, {2, 6, 5, 1}, true}),
                         [](const auto& info) {
                           return absl::StrCat("world", info.param.world_size,
                                               info.param.replicas ? "_replicas" : "_even", "_",
                                               info.index);
                         });

}  // namespace
}  // namespace strata::dist
