// strata-make-checkpoint: writes an official-layout Kimi K3 / Kimi-Linear checkpoint with
// deterministic random weights (engine/demo/checkpoint_generator.h).
//
// Prints one line with the parameter count and the bytes written. Exit status: 0 on success,
// 2 for bad flags or option values, 1 for I/O errors.
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/command_line.h"
#include "core/status.h"
#include "engine/demo/checkpoint_generator.h"
#include "engine/demo/demo_tokenizer.h"

namespace {

namespace demo = strata::engine::demo;

const strata::CommandSpec& Spec() {
  static const strata::CommandSpec spec = {
      .program = "strata-make-checkpoint",
      .description = "write an official-layout checkpoint with deterministic random weights",
      .flags =
          {
              {"preset", true, "tiny | demo | bench (required)"},
              {"out", true, "the directory to write (required)"},
              {"family", true, "k3 | kimi-linear (default: tiny/demo k3, bench kimi-linear)"},
              {"seed", true, "PRNG seed (default 0); same options give byte-identical files"},
              {"shards", true, "safetensors files (default 1; >1 adds the index json)"},
              {"mxfp4", false, "K3 only: routed experts as MXFP4 (compressed-tensors)"},
              {"vision", false,
               "K3 only: add the vision tower and projector (vision_tower.*, mm_projector.*, "
               "vision_config, preprocessor_config.json) so the checkpoint takes images; the "
               "demo preset always has them. Sizes: --set vision_*"},
              {"demo-tokenizer", false,
               "also write the demo tokenizer so that `strata serve --model DIR` serves it (Kimi "
               "K3's "
               "control tokens for --family k3, Kimi K2's tokens and chat template for "
               "kimi-linear)"},
              {"set", true, "override a preset value, key=value (repeatable; keys below)"},
          },
      .required = {"preset", "out"},
      .notes = absl::StrCat(
          "--set keys: ", absl::StrJoin(demo::OverrideKeys(), ", "),
          "\nvision_* keys (with --vision): vision_hidden (D), vision_qkv (heads × head_dim, "
          "head_dim a multiple of 4), vision_heads, vision_intermediate, vision_layers, "
          "vision_pos_emb (position table height = width), vision_in_patch_limit (patches per "
          "image); tiny: 32, 48, 3, 64, 2, 8, 1024; demo: 128, 128, 4, 256, 2, 16, 4096"),
  };
  return spec;
}

absl::StatusOr<demo::GeneratorOptions> ReadOptions(const strata::Flags& flags) {
  demo::GeneratorOptions options;
  options.preset = flags.GetOr("preset", "");
  if (auto family = flags.Get("family")) options.family = *family;
  const std::string seed = flags.GetOr("seed", "0");
  if (!absl::SimpleAtoi(seed, &options.seed)) {
    return absl::InvalidArgumentError(absl::StrCat("--seed: bad number '", seed, "'"));
  }
  ASSIGN_OR_RETURN(const int64_t shards, flags.GetInt("shards", 1, 1, 1 << 16));
  options.num_shards = static_cast<int>(shards);
  options.mxfp4_experts = flags.Has("mxfp4");
  options.vision = flags.Has("vision");
  for (const std::string& value : flags.GetAll("set")) {
    const size_t eq = value.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--set expects key=value, got '", value, "'"));
    }
    options.overrides[value.substr(0, eq)] = value.substr(eq + 1);
  }
  return options;
}

absl::Status Run(const strata::Flags& flags) {
  ASSIGN_OR_RETURN(const demo::GeneratorOptions options, ReadOptions(flags));
  const std::string out_dir = flags.GetOr("out", "");
  ASSIGN_OR_RETURN(const demo::GeneratedCheckpoint generated,
                   demo::GenerateCheckpoint(options, out_dir));
  const demo::ModelDims& dims = generated.dims;
  if (flags.Has("demo-tokenizer")) {
    RETURN_IF_ERROR(demo::WriteDemoTokenizer(
        out_dir, dims.k3 ? demo::DemoChatFormat::kKimiK3 : demo::DemoChatFormat::kKimiK2));
  }
  const std::string vision =
      dims.vision ? absl::StrCat(" (", generated.num_vision_parameters, " in the vision tower)")
                  : std::string();
  std::printf("wrote %s: %s %s, %lld parameters%s, %lld bytes in %zu files (seed %llu%s)\n",
              out_dir.c_str(), dims.k3 ? "kimi-k3" : "kimi-linear", options.preset.c_str(),
              static_cast<long long>(generated.num_parameters), vision.c_str(),
              static_cast<long long>(generated.num_bytes), generated.files.size(),
              static_cast<unsigned long long>(options.seed), dims.mxfp4 ? ", mxfp4" : "");
  if (flags.Has("demo-tokenizer"))
    std::printf("wrote the demo tokenizer into %s\n", out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return strata::RunCommand(Spec(), std::vector<std::string>(argv + 1, argv + argc), Run);
}
