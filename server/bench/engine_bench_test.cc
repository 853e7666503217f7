// The engine benchmark on the CPU backend: a small run through the real scheduler and executor
// reports every field `strata bench --json` documents, with rates that are positive and floors
// from the ceilings it measured.
#include "server/bench/engine_bench.h"

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "engine/demo/checkpoint_generator.h"

namespace strata::bench {
namespace {

TEST(EngineBenchTest, CpuRunReportsRatesAndFloors) {
  const std::string dir = testing::TempDir() + "/engine_bench_" + std::to_string(getpid());
  engine::demo::GeneratorOptions generator;
  generator.preset = "tiny";
  ASSERT_TRUE(engine::demo::GenerateCheckpoint(generator, dir).ok());
  auto model = engine::Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  EngineBenchOptions options;
  options.prompt_tokens = 9;
  options.gen_tokens = 4;
  options.batch = 3;
  auto backend = CpuEngineBackend(**model, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ(backend->layout.num_slots, 3);
  EXPECT_GE(backend->layout.num_tokens(), 3 * (9 + 4));
  auto report = RunEngineBench(**model, dir, *backend, options);
  ASSERT_TRUE(report.ok()) << report.status();
  const nlohmann::ordered_json& r = *report;
  EXPECT_EQ(r["device"], "cpu");
  EXPECT_EQ(r["batch"], 3);
  for (const char* key :
       {"prefill_tokens_per_s", "decode_tokens_per_s", "prefill_floor_tokens_per_s",
        "decode_floor_tokens_per_s", "measured_read_bandwidth_gb_s", "measured_peak_f32_gflop_s",
        "decode_step_bytes"}) {
    ASSERT_TRUE(r.contains(key)) << key;
    EXPECT_GT(r[key].get<double>(), 0.0) << key;
  }
  // What the weights are, as /server_info says it.
  EXPECT_EQ(r["weight_bytes"].get<int64_t>(), (*model)->weight_stats().total_bytes);
  EXPECT_EQ(r["weights"]["projections"], engine::ProjectionFormat((*model)->weights()));
  EXPECT_EQ(r["weights"]["lm_head"], "bf16");
  EXPECT_LT(r["decode_step_bytes"].get<double>(), r["weight_bytes"].get<double>());
  EXPECT_NEAR(
      r["decode_pct_of_roofline"].get<double>(),
      100.0 * r["decode_tokens_per_s"].get<double>() / r["decode_floor_tokens_per_s"].get<double>(),
      1e-9);
  const std::string bound = r["decode_floor_bound_by"];
  EXPECT_TRUE(bound == "bandwidth" || bound == "compute") << bound;
  // The CPU backend times its first run; the executor's share of decode is a fraction.
  EXPECT_EQ(r["warm_up_runs"], 0);
  EXPECT_GT(r["decode_execute_share"].get<double>(), 0.0);
  EXPECT_LE(r["decode_execute_share"].get<double>(), 1.0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::bench
