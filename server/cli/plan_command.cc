// `strata plan` (commands.h): the capacity plan of a TP × DCP × DP deployment on paper, from a
// checkpoint's config.json alone (engine/parallel_plan.h has the rules):
//
//   strata plan --config config.json --tensor-parallel-size 8 --decode-context-parallel-size 8
//               --data-parallel-size 2 --device-memory 141GiB [--quantization mxfp4]
//               [--kv-cache-dtype fp8] [--reserve 10%+2GiB] [--json]
//
// Prints a table (or, with --json, one JSON object) on stdout. A deployment that cannot work
// (heads not divisible, DCP size not dividing TP size, weights larger than the device) is a
// usage error (exit 2) naming the flag and the counts.
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/file.h"
#include "core/status.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/parallel_plan.h"
#include "server/cli/commands.h"
#include "server/cli/flags.h"
#include "server/cli/serve_runtime.h"

namespace strata::cli {
namespace {

const std::vector<FlagSpec> kPlanFlags = {
    {"config", true, "the model's config.json (or a checkpoint directory holding one)"},
    {"tensor-parallel-size", true, "T: ranks holding one copy of the model (default 1)"},
    {"tp-size", true, "SGLang's name for --tensor-parallel-size"},
    {"decode-context-parallel-size", true,
     "C: ranks of a TP group that split each sequence's latent cache by position; divides T "
     "(default 1)"},
    {"dcp-size", true, "SGLang's name for --decode-context-parallel-size"},
    {"data-parallel-size", true, "D: TP groups (world size T x D; default 1)"},
    {"dp-size", true, "SGLang's name for --data-parallel-size"},
    {"device-memory", true,
     "memory of one rank's device, e.g. 143771MiB (an H200 as nvidia-smi reports it), 81559MiB "
     "(an H100); the syntax of --kv-cache-memory"},
    {"quantization", true, kQuantizationHelp},
    {"kv-cache-dtype", true, kKvCacheDTypeHelp},
    {"device", true, "cuda (default) | cpu: what --kv-cache-dtype auto means"},
    {"reserve", true,
     "kept back from the caches for activations and workspace: a percentage of the memory left "
     "after the weights plus bytes, e.g. 10%+2GiB (the default: serve's default budget), 5%, "
     "4GiB"},
    {"activation-dtype", true,
     "element of the activations collectives carry: f32 (default, the engine's) | bf16"},
    {"max-num-seqs", true, "state slots when counting latent tokens per rank (default 64)"},
    {"block-size", true, "tokens per latent cache page (default 64)"},
    {"no-enable-prefix-caching", false,
     "count tokens without KDA checkpoints (prefix caching off; default on: 10% of the rest)"},
    {"sequence-length", true, "tokens of the long sequence counted in 'fit' (default 1048576)"},
    {"json", false, "print one JSON object instead of the table"},
};

// A size flag or its SGLang alias (not both).
absl::StatusOr<int64_t> SizeFlag(const Flags& flags, const std::string& name,
                                 const std::string& alias) {
  ASSIGN_OR_RETURN(const std::string given, flags.NameOrAlias(name, alias));
  return flags.GetInt(given, 1, 1, 1 << 20);
}

// "10%+2GiB", "5%", "4GiB", "0" → fraction and bytes.
absl::Status ParseReserve(const std::string& text, engine::ParallelPlanOptions* o) {
  o->reserve_fraction = 0;
  o->reserve_bytes = 0;
  for (absl::string_view part : absl::StrSplit(text, '+')) {
    const std::string item(absl::StripAsciiWhitespace(part));
    if (!item.empty() && item.back() == '%') {
      double percent = 0;
      if (!absl::SimpleAtod(item.substr(0, item.size() - 1), &percent) || percent < 0 ||
          percent >= 100) {
        return absl::InvalidArgumentError("--reserve: '" + item +
                                          "' must be a percentage in [0, 100)");
      }
      o->reserve_fraction += percent / 100.0;
    } else {
      ASSIGN_OR_RETURN(int64_t bytes, ParseBytes(item, "reserve", /*allow_zero=*/true));
      o->reserve_bytes += bytes;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<engine::ModelConfig> ReadConfig(const std::string& path) {
  absl::StatusOr<engine::ModelConfig> cfg =
      std::filesystem::is_directory(path) ? engine::LoadModelConfig(path) : [&]() {
        absl::StatusOr<std::string> text = ReadFileToString(path);
        if (!text.ok()) return absl::StatusOr<engine::ModelConfig>(text.status());
        return engine::ParseModelConfig(*text, path);
      }();
  if (!cfg.ok()) return absl::FailedPreconditionError(cfg.status().message());
  if (absl::Status valid = cfg->Validate(); !valid.ok()) {
    return absl::FailedPreconditionError(valid.message());
  }
  return cfg;
}

absl::Status RunPlan(const Flags& flags) {
  engine::ParallelPlanOptions o;
  ASSIGN_OR_RETURN(int64_t t, SizeFlag(flags, "tensor-parallel-size", "tp-size"));
  ASSIGN_OR_RETURN(int64_t c, SizeFlag(flags, "decode-context-parallel-size", "dcp-size"));
  ASSIGN_OR_RETURN(int64_t d, SizeFlag(flags, "data-parallel-size", "dp-size"));
  o.tensor_parallel_size = static_cast<int>(t);
  o.decode_context_parallel_size = static_cast<int>(c);
  o.data_parallel_size = static_cast<int>(d);
  ASSIGN_OR_RETURN(o.device_memory_bytes, ParseBytes(*flags.Get("device-memory"), "device-memory"));
  ASSIGN_OR_RETURN(o.quantization,
                   engine::ParseWeightQuantization(flags.GetOr("quantization", "none")));
  const std::string device = flags.GetOr("device", "cuda");
  if (device != "cuda" && device != "cpu") {
    return absl::InvalidArgumentError("--device must be cuda or cpu, got '" + device + "'");
  }
  ASSIGN_OR_RETURN(o.kv_cache_dtype,
                   ParseKvCacheDType(flags.GetOr("kv-cache-dtype", "auto"), device));
  RETURN_IF_ERROR(ParseReserve(flags.GetOr("reserve", "10%+2GiB"), &o));
  const std::string activation = flags.GetOr("activation-dtype", "f32");
  if (activation != "f32" && activation != "bf16") {
    return absl::InvalidArgumentError("--activation-dtype must be f32 or bf16, got '" + activation +
                                      "'");
  }
  o.activation_bytes = activation == "f32" ? 4 : 2;
  ASSIGN_OR_RETURN(int64_t seqs, flags.GetInt("max-num-seqs", 64, 1, 1 << 16));
  o.max_num_seqs = static_cast<int32_t>(seqs);
  ASSIGN_OR_RETURN(int64_t block, flags.GetInt("block-size", 64, 1, 1 << 16));
  o.block_size = static_cast<int>(block);
  o.checkpoint_fraction = flags.Has("no-enable-prefix-caching") ? 0.0 : 0.1;
  ASSIGN_OR_RETURN(o.sequence_tokens,
                   flags.GetInt("sequence-length", int64_t{1} << 20, 1, int64_t{1} << 40));

  ASSIGN_OR_RETURN(engine::ModelConfig cfg, ReadConfig(*flags.Get("config")));
  ASSIGN_OR_RETURN(engine::ParallelPlan plan, engine::PlanParallel(cfg, o));
  if (flags.Has("json")) {
    std::cout << engine::ParallelPlanJson(plan) << "\n";
  } else {
    std::cout << engine::ParallelPlanTable(plan);
  }
  return absl::OkStatus();
}

}  // namespace

const CommandSpec& PlanSpec() {
  static const CommandSpec spec{
      .program = "strata",
      .command = "plan",
      .description =
          "capacity plan of a TP x DCP x DP deployment from config.json alone: weights, "
          "caches and collectives per rank",
      .flags = kPlanFlags,
      .required = {"config", "device-memory"},
      .synopsis =
          "--config config.json --device-memory SIZE [--tensor-parallel-size T] "
          "[--decode-context-parallel-size C] [--data-parallel-size D] [flags]",
      .notes =
          "Weights are counted in their storage format (K3's release: MXFP4 experts); the "
          "rules are in engine/parallel_plan.h and docs/serving.md."};
  return spec;
}

int PlanCommand(const std::vector<std::string>& args) {
  return RunCommand(PlanSpec(), args, RunPlan);
}

}  // namespace strata::cli
