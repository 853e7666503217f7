// One token drawn from a logits row (engine::Sampler: penalties, top-k / top-p / min-p, the draw)
// against the time to read the row once at the read bandwidth measured at the start (the floor of
// any exact sampler: every logit must be seen). Rows of N(0, σ) logits: σ = 1 is the flat
// distribution of a random-weight model (the demo, the bench checkpoint), where the best 1,024
// tokens hold little of the mass and the draw ranks far down; σ = 4 is closer to a trained
// model's. Not run by ctest.
//
// Run: engine_sampling_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/roofline.h"
#include "engine/sampling.h"

namespace strata::engine {
namespace {

struct Case {
  std::string name;
  SamplingParams params;
};

// Best over 5 passes of the mean time per draw over `rows` (each copied first: Sample modifies
// its row in place), in ms.
double MsPerDraw(const std::vector<std::vector<float>>& rows, const SamplingParams& params) {
  Sampler sampler(params, /*fallback_seed=*/7, /*prompt=*/{});
  std::vector<float> work(rows[0].size());
  double best_ms = 1e30;
  int64_t checksum = 0;
  for (int pass = 0; pass < 5; ++pass) {
    double ms = 0;
    for (const std::vector<float>& row : rows) {
      std::copy(row.begin(), row.end(), work.begin());
      const auto t0 = std::chrono::steady_clock::now();
      checksum += sampler.Sample(work.data(), static_cast<int64_t>(work.size()));
      ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    best_ms = std::min(best_ms, ms / static_cast<double>(rows.size()));
  }
  if (checksum == -1) std::printf(" ");  // keeps the draws
  return best_ms;
}

void Run() {
  const double read_bytes_per_s = bench::MeasureReadBandwidth(int64_t{256} << 20);
  std::printf("ceiling: read bandwidth %.1f GB/s (one thread's share is what a draw gets)\n",
              read_bytes_per_s / 1e9);
  std::vector<Case> cases;
  auto add = [&](std::string name, float temperature, int top_k, float top_p) {
    Case c{std::move(name), {}};
    c.params.temperature = temperature;
    c.params.top_k = top_k;
    c.params.top_p = top_p;
    c.params.seed = 11;
    cases.push_back(c);
  };
  add("greedy", 0.0f, 0, 1.0f);
  add("temperature 1", 1.0f, 0, 1.0f);
  add("top-p 0.9", 1.0f, 0, 0.9f);
  add("top-k 50", 1.0f, 50, 1.0f);
  std::printf("%-8s %-5s %-14s %10s %10s %8s\n", "vocab", "sigma", "sampling", "ms/draw",
              "floor ms", "% floor");
  for (const int64_t vocab : {int64_t{32000}, int64_t{163840}}) {
    for (const float sigma : {1.0f, 4.0f}) {
      std::mt19937 rng(1);
      std::normal_distribution<float> logit(0.0f, sigma);
      std::vector<std::vector<float>> rows(32, std::vector<float>(static_cast<size_t>(vocab)));
      for (auto& row : rows) {
        for (float& x : row) x = logit(rng);
      }
      const double floor_ms = 1e3 * static_cast<double>(vocab) * 4.0 / read_bytes_per_s;
      for (const Case& c : cases) {
        const double ms = MsPerDraw(rows, c.params);
        std::printf("%-8lld %-5.0f %-14s %10.3f %10.4f %7.1f%%\n", static_cast<long long>(vocab),
                    sigma, c.name.c_str(), ms, floor_ms, 100.0 * floor_ms / ms);
      }
    }
  }
}

}  // namespace
}  // namespace strata::engine

int main() {
  strata::engine::Run();
  return 0;
}
