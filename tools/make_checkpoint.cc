// strata-make-checkpoint: writes an official-layout Kimi K3 / Kimi-Linear checkpoint with
// deterministic random weights (see checkpoint_generator.h).
//
//   strata-make-checkpoint --family k3|kimi-linear --preset tiny|demo|bench --out DIR
//                          [--seed N] [--shards N] [--mxfp4] [--demo-tokenizer]
//                          [--set key=value ...]
//
// Prints one line with the parameter count and the bytes written. Exit status: 0 on success,
// 2 for bad flags or option values, 1 for I/O errors.
#include <cstdio>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "tools/bpe_trainer/demo_tokenizer.h"
#include "tools/checkpoint_generator.h"

namespace {

constexpr char kUsage[] =
    "usage: strata-make-checkpoint --preset tiny|demo|bench --out DIR [--family k3|kimi-linear]\n"
    "                              [--seed N] [--shards N] [--mxfp4] [--demo-tokenizer]\n"
    "                              [--set key=value ...]\n"
    "  --family   model family (default: tiny/demo k3, bench kimi-linear)\n"
    "  --seed     PRNG seed (default 0); same options give byte-identical files\n"
    "  --shards   number of safetensors files (default 1; >1 adds model.safetensors.index.json)\n"
    "  --mxfp4    K3 only: routed experts as MXFP4 (compressed-tensors mxfp4-pack-quantized)\n"
    "  --demo-tokenizer  also write the demo tokenizer (tiktoken.model, tokenizer_config.json)\n"
    "             so that `strata serve --model DIR` can serve the checkpoint\n"
    "  --set      override a preset value; keys: ";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "strata-make-checkpoint: %s\n(--help lists the flags and --set keys)\n",
               message.c_str());
  return 2;
}

struct ParsedArgs {
  strata::tools::GeneratorOptions options;
  std::string out_dir;
  bool demo_tokenizer = false;
  bool help = false;
};

// Parses argv into `args`; returns an error message, empty on success.
std::string ParseArgs(int argc, char** argv, ParsedArgs& args) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    bool has_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    if (flag == "--help" || flag == "-h") {
      args.help = true;
      continue;
    }
    if (flag == "--demo-tokenizer") {
      if (has_value) return "--demo-tokenizer takes no value";
      args.demo_tokenizer = true;
      continue;
    }
    if (flag == "--mxfp4") {
      if (has_value) return "--mxfp4 takes no value";
      args.options.mxfp4_experts = true;
      continue;
    }
    if (flag != "--family" && flag != "--preset" && flag != "--out" && flag != "--seed" &&
        flag != "--shards" && flag != "--set") {
      return "unknown argument '" + std::string(argv[i]) + "'";
    }
    if (!has_value) {
      if (i + 1 >= argc) return flag + " needs a value";
      value = argv[++i];
    }
    if (flag == "--family") {
      args.options.family = value;
    } else if (flag == "--preset") {
      args.options.preset = value;
    } else if (flag == "--out") {
      args.out_dir = value;
    } else if (flag == "--seed") {
      if (!absl::SimpleAtoi(value, &args.options.seed)) return "--seed: bad number '" + value + "'";
    } else if (flag == "--shards") {
      if (!absl::SimpleAtoi(value, &args.options.num_shards) || args.options.num_shards < 1) {
        return "--shards: expected an integer >= 1, got '" + value + "'";
      }
    } else {  // --set
      const size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0) return "--set expects key=value, got '" + value + "'";
      args.options.overrides[value.substr(0, eq)] = value.substr(eq + 1);
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  ParsedArgs args;
  args.options.preset.clear();
  if (std::string error = ParseArgs(argc, argv, args); !error.empty()) return UsageError(error);
  if (args.help) {
    std::printf("%s%s\n", kUsage, absl::StrJoin(strata::tools::OverrideKeys(), ", ").c_str());
    return 0;
  }
  if (args.options.preset.empty()) return UsageError("--preset is required");
  if (args.out_dir.empty()) return UsageError("--out is required");

  auto generated = strata::tools::GenerateCheckpoint(args.options, args.out_dir);
  if (!generated.ok()) {
    if (generated.status().code() == absl::StatusCode::kInvalidArgument) {
      return UsageError(std::string(generated.status().message()));
    }
    std::fprintf(stderr, "strata-make-checkpoint: %s\n", generated.status().ToString().c_str());
    return 1;
  }
  if (args.demo_tokenizer) {
    if (absl::Status s = strata::tools::WriteDemoTokenizer(args.out_dir); !s.ok()) {
      std::fprintf(stderr, "strata-make-checkpoint: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const strata::tools::ModelDims& dims = generated->dims;
  std::printf("wrote %s: %s %s, %lld parameters, %lld bytes in %zu files (seed %llu%s)\n",
              args.out_dir.c_str(), dims.k3 ? "kimi-k3" : "kimi-linear",
              args.options.preset.c_str(), static_cast<long long>(generated->num_parameters),
              static_cast<long long>(generated->num_bytes), generated->files.size(),
              static_cast<unsigned long long>(args.options.seed), dims.mxfp4 ? ", mxfp4" : "");
  if (args.demo_tokenizer) std::printf("wrote the demo tokenizer into %s\n", args.out_dir.c_str());
  return 0;
}
