// Expert-parallel MoE exchange: dispatch + combine throughput per rank and the share of the
// routed-expert step spent in communication, at 1, 2 and 4 ranks, over two backends:
//   gloo  ranks are processes (fork) connected by the Gloo communicator over 127.0.0.1 TCP
//   fake  ranks are threads of one process over the in-process fake communicator
//         (shared-memory copies): the exchange's own overhead without a network
// The experts are a synthetic MoE of the Kimi-Linear "bench" shape (hidden 1024, 64 experts,
// top-8, bf16 weights), random routing, EvenPlacement. Two expert widths: 256 (the real
// layer) and 8 (experts nearly free: what is left is the exchange itself).
//
// Per configuration it prints, averaged over ranks and exchanges:
//   exchange_ms  wall time of one Exchange (the routed part of one MoE layer)
//   a2a_ms       of which inside the three collectives (includes waiting for slower ranks)
//   expert_ms    of which in MoeRunExperts
//   comm_pct     a2a_ms / exchange_ms
//   MB_per_rank  bytes this rank sent to + received from other ranks per exchange
//   GBps         MB_per_rank / a2a_ms (dispatch + combine bytes per second per rank)
//
// Run: dist_moe_dispatch_bench [iterations=20] (not run by ctest). OpenMP threads per rank:
// max(1, cores / ranks). The Gloo runs come first: the parent must not have started a kernel
// thread pool before it forks.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "dist/expert_placement.h"
#include "dist/fork_ranks_test_util.h"
#include "dist/gloo_communicator.h"
#include "dist/moe_dispatch.h"
#include "dist/testing/fake_communicator.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/workspace.h"

namespace strata::dist {
namespace {

constexpr int kHidden = 1024, kExperts = 64, kTopK = 8;

engine::Linear Bf16Linear(int64_t out, int64_t in, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  engine::Linear l;
  l.format = engine::WeightFormat::kBf16;
  l.out_features = out;
  l.in_features = in;
  l.owned = AlignedBuffer(static_cast<size_t>(out * in) * sizeof(uint16_t));
  uint16_t* data = l.owned.as<uint16_t>();
  for (int64_t i = 0; i < out * in; ++i) data[i] = F32ToBf16(u(rng));
  l.data = data;
  return l;
}

struct Moe {
  engine::ModelConfig cfg;
  engine::MoeWeights w;
};

Moe MakeBenchMoe(int inter) {
  Moe moe;
  moe.cfg.hidden_size = kHidden;
  moe.cfg.activation = engine::FfnActivation::kSwiGlu;
  moe.cfg.moe.num_experts = kExperts;
  moe.cfg.moe.num_experts_per_token = kTopK;
  moe.cfg.moe.moe_intermediate_size = inter;
  std::mt19937 rng(7);
  for (int e = 0; e < kExperts; ++e) {
    engine::ExpertWeights ew;
    ew.w1 = Bf16Linear(inter, kHidden, rng);
    ew.w3 = Bf16Linear(inter, kHidden, rng);
    ew.w2 = Bf16Linear(kHidden, inter, rng);
    moe.w.experts.push_back(std::move(ew));
  }
  return moe;
}

// Averages over ranks of the per-exchange means.
struct Result {
  float exchange_ms = 0, a2a_ms = 0, expert_ms = 0, mb = 0;
};

// One rank's loop; the per-rank results are summed over the group (AllReduce) and averaged.
absl::StatusOr<Result> RunRank(Communicator* comm, const Moe& moe, int64_t rows, int iterations,
                               int omp_threads) {
  omp_set_num_threads(omp_threads);
  std::mt19937 rng(static_cast<uint32_t>(comm->rank() + 1));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> z(static_cast<size_t>(rows * kHidden));
  for (float& v : z) v = u(rng);
  std::vector<int32_t> ids, all(kExperts);
  std::vector<float> weights;
  for (int e = 0; e < kExperts; ++e) all[static_cast<size_t>(e)] = e;
  for (int64_t r = 0; r < rows; ++r) {
    std::shuffle(all.begin(), all.end(), rng);
    ids.insert(ids.end(), all.begin(), all.begin() + kTopK);
    for (int j = 0; j < kTopK; ++j) weights.push_back(1.0f / kTopK);
  }
  std::vector<float> routed(z.size());
  ExpertParallelExchange exchange(comm, EvenPlacement(kExperts, comm->world_size()));
  engine::Workspace ws;
  for (int it = -2; it < iterations; ++it) {  // two warm-up steps
    if (it == 0) exchange.stats();
    exchange.Exchange(moe.cfg, moe.w, 0, z.data(), rows, ids.data(), weights.data(), routed.data(),
                      nullptr, ws);
  }
  const ExpertExchangeStats s = exchange.stats();
  const double n = static_cast<double>(s.num_exchanges) * comm->world_size();
  float sums[4] = {
      static_cast<float>(1e3 * s.exchange_seconds / n),
      static_cast<float>(1e3 * s.all_to_all_seconds / n),
      static_cast<float>(1e3 * s.expert_seconds / n),
      static_cast<float>(1e-6 * static_cast<double>(s.bytes_sent + s.bytes_received) / n)};
  if (absl::Status st = comm->AllReduce(sums, 4, ReduceOp::kSum); !st.ok()) return st;
  return Result{sums[0], sums[1], sums[2], sums[3]};
}

void Print(const char* backend, int world, int64_t rows, int inter, int omp, const Result& r) {
  std::printf("%-5s %5d %5lld %5d %4d %11.3f %8.3f %9.3f %7.1f%% %11.3f %7.2f\n", backend, world,
              static_cast<long long>(rows), inter, omp, r.exchange_ms, r.a2a_ms, r.expert_ms,
              r.exchange_ms > 0 ? 100.0 * r.a2a_ms / r.exchange_ms : 0.0, r.mb,
              r.a2a_ms > 0 ? r.mb / r.a2a_ms : 0.0);
  std::fflush(stdout);
}

// Ranks as processes over Gloo; rank 0 prints.
void RunGloo(const Moe& moe, int world, int64_t rows, int iterations, int omp) {
  const int port = testing::FreePort();
  const auto reports = testing::ForkRanks(
      world,
      [&](int rank) -> std::string {
        auto comm = ConnectGloo(testing::LoopbackOptions(world, rank, port, "moe-dispatch-bench"));
        if (!comm.ok()) return std::string(comm.status().message());
        auto result = RunRank(comm->get(), moe, rows, iterations, omp);
        if (!result.ok()) return std::string(result.status().message());
        if (rank == 0) Print("gloo", world, rows, moe.cfg.moe.moe_intermediate_size, omp, *result);
        return "";
      },
      std::chrono::seconds(600));
  for (const auto& report : reports) {
    if (!report.ok) std::printf("gloo rank %d failed: %s\n", report.rank, report.message.c_str());
  }
}

// Ranks as threads over the fake communicator.
void RunFake(const Moe& moe, int world, int64_t rows, int iterations, int omp) {
  testing::FakeGroup group(world);
  std::vector<Result> results(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      auto result = RunRank(group.rank(rank), moe, rows, iterations, omp);
      if (result.ok()) results[static_cast<size_t>(rank)] = *result;
    });
  }
  for (auto& t : threads) t.join();
  Print("fake", world, rows, moe.cfg.moe.moe_intermediate_size, omp, results[0]);
}

int Main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf(
      "MoE %d experts top-%d, hidden %d, bf16 experts, random routing; %d iterations; "
      "%d cores\n",
      kExperts, kTopK, kHidden, iterations, cores);
  std::printf("%-5s %5s %5s %5s %4s %11s %8s %9s %8s %11s %7s\n", "comm", "ranks", "rows", "inter",
              "omp", "exchange_ms", "a2a_ms", "expert_ms", "comm_pct", "MB_per_rank", "GBps");
  std::fflush(stdout);  // before forking: children must not inherit buffered output
  std::vector<Moe> moes;
  moes.push_back(MakeBenchMoe(256));
  moes.push_back(MakeBenchMoe(8));
  for (const bool gloo : {true, false}) {
    for (const Moe& moe : moes) {
      for (int64_t rows : {16, 256}) {
        for (int world : {1, 2, 4}) {
          const int omp = std::max(1, cores / world);
          if (gloo) {
            RunGloo(moe, world, rows, iterations, omp);
          } else {
            RunFake(moe, world, rows, iterations, omp);
          }
        }
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace strata::dist

int main(int argc, char** argv) { return strata::dist::Main(argc, argv); }
