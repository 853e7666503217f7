// cuda_engine_bench: `strata bench --device cuda` as a small standalone binary (the GPU check
// carries it to a machine that cannot run the full strata binary's libraries). Same flags'
// meaning: --model DIR [--prompt-tokens N] [--gen-tokens N] [--batch N]
// [--quantization mxfp4|int8|mxfp4,int8] [--json].
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "engine/model.h"
#include "server/bench/engine_bench.h"
#include "server/bench/engine_bench_cuda.h"

int main(int argc, char** argv) {
  using namespace strata;
  std::string dir;
  bench::EngineBenchOptions options;
  engine::ModelLoadOptions load;
  load.copy_weights = false;  // uploaded to the device from the mapping
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* flag) -> const char* {
      if (std::strcmp(argv[i], flag) != 0 || i + 1 >= argc) return nullptr;
      return argv[++i];
    };
    if (const char* v = value("--model")) {
      dir = v;
    } else if (const char* v = value("--prompt-tokens")) {
      options.prompt_tokens = std::atoll(v);
    } else if (const char* v = value("--gen-tokens")) {
      options.gen_tokens = std::atoll(v);
    } else if (const char* v = value("--batch")) {
      options.batch = std::atoi(v);
    } else if (const char* v = value("--quantization")) {
      auto q = engine::ParseWeightQuantization(v);
      if (!q.ok()) {
        std::fprintf(stderr, "%s\n", q.status().ToString().c_str());
        return 2;
      }
      load.quantization = *q;
    } else if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s --model DIR [--prompt-tokens N] [--gen-tokens N] [--batch N] "
                   "[--quantization mxfp4|int8|mxfp4,int8] [--json]\n",
                   argv[0]);
      return 2;
    }
  }
  if (dir.empty() || options.prompt_tokens < 1 || options.gen_tokens < 2 || options.batch < 1) {
    std::fprintf(stderr, "%s: --model is required; prompt ≥ 1, gen ≥ 2, batch ≥ 1\n", argv[0]);
    return 2;
  }
  auto model = engine::Model::Load(dir, load);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  auto backend = bench::CudaEngineBackend(**model, options);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  auto report = bench::RunEngineBench(**model, dir, *backend, options);
  if (!report.ok()) {
    std::fprintf(stderr, "%s\n", report.status().ToString().c_str());
    return 1;
  }
  if (json) {
    std::cout << report->dump() << std::endl;
  } else {
    bench::PrintEngineBenchTable(*report, *backend);
  }
  return 0;
}
