// `strata generate` and `strata logits`: run the model on token ids (no tokenizer needed);
// `strata quantize`: write a checkpoint with MXFP4 routed experts.
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

#include "core/file.h"
#include "core/log.h"
#include "core/npy.h"
#include "core/status.h"
#include "engine/checkpoint_quantize.h"
#include "engine/generator.h"
#include "engine/media_embedding.h"
#include "engine/model.h"
#include "engine/vision/image_input.h"
#include "kvcache/memory_planner.h"
#include "server/cli/commands.h"
#include "server/cli/default_model.h"
#include "server/cli/flags.h"
#include "server/cli/tensor_parallel_ranks.h"

namespace strata::cli {
namespace {

void PrintMemoryUse(const engine::Model& model) {
  const engine::CacheGeometry& g = model.geometry();
  LOG_INFO("engine",
           "cache per token: {} bytes (MLA latent, {} layers x {} f32); state per "
           "sequence: {} bytes (KDA, {} layers)",
           g.latent_bytes_per_token(), g.num_mla_layers, g.latent_dim, g.state_bytes_per_sequence(),
           g.num_kda_layers);
}

// The checkpoint directory and load options of --model / --quantization.
struct ModelSource {
  std::string dir;
  engine::ModelLoadOptions load;
};

absl::StatusOr<ModelSource> ModelSourceFromFlags(const Flags& flags) {
  ModelSource source;
  ASSIGN_OR_RETURN(source.dir, ResolveModelDir(flags.GetOr("model", "")));
  ASSIGN_OR_RETURN(source.load.quantization,
                   engine::ParseWeightQuantization(flags.GetOr("quantization", "")));
  return source;
}

// Runs body(model, group) on one model (group null), or on every rank of --tensor-parallel-size
// T > 1 (each its shard); only rank 0's body may print: the ranks compute the same results.
absl::Status RunOnModel(
    const Flags& flags,
    const std::function<absl::Status(const engine::Model&, engine::TensorParallelGroup*, bool)>&
        body) {
  ASSIGN_OR_RETURN(const int tp_size, TensorParallelSizeFromFlags(flags));
  ASSIGN_OR_RETURN(ModelSource source, ModelSourceFromFlags(flags));
  ASSIGN_OR_RETURN(source.load.decode_context_parallel_size,
                   DecodeContextParallelSizeFromFlags(flags));
  if (tp_size == 1) {
    ASSIGN_OR_RETURN(auto model, engine::Model::Load(source.dir, source.load));
    return body(*model, nullptr, true);
  }
  return RunTensorParallelRanks(
      source.dir, source.load, tp_size,
      [&](int rank, const engine::Model& model, dist::CommunicatorTensorParallelGroup* group) {
        return body(model, group, rank == 0);
      });
}

// Reads a JSON array of token ids ([1, 2, 3], or [[1, 2, 3]] for one sequence).
absl::StatusOr<std::vector<int32_t>> ReadIdsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read --ids-file " + path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, false);
  if (json.is_array() && json.size() == 1 && json[0].is_array()) json = json[0];
  if (json.is_discarded() || !json.is_array()) {
    return absl::InvalidArgumentError(path + ": expected a JSON array of token ids");
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < json.size(); ++i) {
    if (!json[i].is_number_integer() || json[i].get<int64_t>() < 0 ||
        json[i].get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(path + ": entry " + std::to_string(i) +
                                        " is not a non-negative integer token id");
    }
    ids.push_back(json[i].get<int32_t>());
  }
  return ids;
}

constexpr char kImageHelp[] =
    "an image file (PNG, JPEG, WebP, GIF) for the next media placeholder id in the prompt "
    "(repeat in prompt order; each placeholder expands to the image's rows)";

// The prompt with each media placeholder expanded to its --image's rows, encoded by the model's
// vision tower (in command-line order); the prompt as given when there is no --image.
absl::StatusOr<std::vector<int32_t>> PromptWithImages(const engine::Model& model,
                                                      const std::vector<int32_t>& ids,
                                                      const std::vector<std::string>& paths,
                                                      std::vector<engine::MediaEmbedding>* media) {
  if (paths.empty()) return ids;
  const engine::VisionEncoder* vision = model.vision();
  if (vision == nullptr) {
    return absl::InvalidArgumentError(
        "--image: this checkpoint has no vision tower (config.json has no vision_config)");
  }
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path));
    auto image = engine::PrepareImage(bytes, vision->config());
    if (!image.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--image ", path, ": ", image.status().message()));
    }
    media->push_back(engine::EncodeImage(*vision, *image));
  }
  return engine::ExpandMediaPlaceholders(
      ids, static_cast<int32_t>(model.config().media_placeholder_token_id), media);
}

const std::vector<FlagSpec> kGenerateFlags = {
    {"model", true, "checkpoint directory (default: the embedded demo model)"},
    {"prompt-ids", true, "prompt token ids, comma separated (required)"},
    {"image", true, kImageHelp},
    {"max-tokens", true, "tokens to generate (default 16)"},
    {"temperature", true, "sampling temperature; greedy when absent or 0"},
    {"top-k", true, "keep the k most likely tokens (0 = off)"},
    {"top-p", true, "nucleus sampling mass in (0, 1]"},
    {"min-p", true, "drop tokens below min_p x the top probability"},
    {"repetition-penalty", true, "vLLM repetition penalty (1 = off)"},
    {"presence-penalty", true, "OpenAI presence penalty in [-2, 2]"},
    {"frequency-penalty", true, "OpenAI frequency penalty in [-2, 2]"},
    {"seed", true, "sampling seed (reproducible output)"},
    {"stop-ids", true, "extra token ids that end generation, comma separated"},
    {"ignore-eos", false, "do not stop at the end-of-sequence token"},
    {"prefill-chunk", true, "prefill chunk size in tokens (default 512)"},
    {"kv-cache-dtype", true, "latent cache rows: f32 (default, exact) | bf16 | fp8"},
    {"cpu-matmul-precision", true, kCpuMatmulPrecisionHelp},
    {"quantization", true, kQuantizationHelp},
    TensorParallelSizeFlag(),
    TpSizeFlag(),
    DecodeContextParallelSizeFlag(),
    DcpSizeFlag(),
    {"log-level", true, "trace|debug|info|warn|error|off (default info)"},
};

absl::StatusOr<engine::GenerateOptions> GenerateOptionsFromFlags(const Flags& flags) {
  engine::GenerateOptions options;
  ASSIGN_OR_RETURN(options.max_tokens, flags.GetInt("max-tokens", 16, 0, 1 << 20));
  ASSIGN_OR_RETURN(options.prefill_chunk_tokens, flags.GetInt("prefill-chunk", 512, 1, 1 << 20));
  ASSIGN_OR_RETURN(options.latent_dtype,
                   ParseKvCacheDType(flags.GetOr("kv-cache-dtype", "auto"), "cpu"));
  RETURN_IF_ERROR(ApplyCpuMatmulPrecision(flags.GetOr("cpu-matmul-precision", "f32")));
  options.ignore_eos = flags.Has("ignore-eos");
  engine::SamplingParams& s = options.sampling;
  ASSIGN_OR_RETURN(auto temperature, flags.GetDouble("temperature", 0, 100));
  s.temperature = temperature ? static_cast<float>(*temperature) : 0.0f;  // greedy by default
  ASSIGN_OR_RETURN(s.top_k, flags.GetInt("top-k", 0, -1, 1 << 30));
  ASSIGN_OR_RETURN(auto top_p, flags.GetDouble("top-p", 1e-9, 1));
  ASSIGN_OR_RETURN(auto min_p, flags.GetDouble("min-p", 0, 1));
  ASSIGN_OR_RETURN(auto rep, flags.GetDouble("repetition-penalty", 1e-6, 100));
  ASSIGN_OR_RETURN(auto presence, flags.GetDouble("presence-penalty", -2, 2));
  ASSIGN_OR_RETURN(auto frequency, flags.GetDouble("frequency-penalty", -2, 2));
  s.top_p = static_cast<float>(top_p.value_or(1.0));
  s.min_p = static_cast<float>(min_p.value_or(0.0));
  s.repetition_penalty = static_cast<float>(rep.value_or(1.0));
  s.presence_penalty = static_cast<float>(presence.value_or(0.0));
  s.frequency_penalty = static_cast<float>(frequency.value_or(0.0));
  if (flags.Has("seed")) {
    ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 0, 0, INT64_MAX));
    s.seed = static_cast<uint64_t>(seed);
  }
  if (auto stop = flags.Get("stop-ids")) {
    ASSIGN_OR_RETURN(options.stop_token_ids, ParseIdList(*stop, "--stop-ids"));
  }
  return options;
}

absl::Status ApplyLogLevel(const Flags& flags) {
  if (auto level_text = flags.Get("log-level")) {
    log::Level level;
    if (!log::ParseLevel(*level_text, &level)) {
      return absl::InvalidArgumentError("--log-level must be trace|debug|info|warn|error|off");
    }
    log::SetLevel(level);
  }
  return absl::OkStatus();
}

absl::Status RunGenerate(const Flags& flags) {
  RETURN_IF_ERROR(ApplyLogLevel(flags));
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                   ParseIdList(flags.GetOr("prompt-ids", ""), "--prompt-ids"));
  ASSIGN_OR_RETURN(const engine::GenerateOptions options, GenerateOptionsFromFlags(flags));
  return RunOnModel(flags,
                    [&](const engine::Model& model, engine::TensorParallelGroup* group,
                        bool lead) -> absl::Status {
                      if (lead) PrintMemoryUse(model);
                      engine::GenerateOptions rank_options = options;
                      rank_options.tensor_parallel = group;
                      ASSIGN_OR_RETURN(const std::vector<int32_t> expanded,
                                       PromptWithImages(model, prompt, flags.GetAll("image"),
                                                        &rank_options.media));
                      ASSIGN_OR_RETURN(std::vector<int32_t> output,
                                       engine::Generate(model, expanded, rank_options));
                      if (lead) std::cout << nlohmann::json(output).dump() << std::endl;
                      return absl::OkStatus();
                    });
}

const std::vector<FlagSpec> kLogitsFlags = {
    {"model", true, "checkpoint directory (default: the embedded demo model)"},
    {"ids-file", true, "JSON array of prompt token ids (required)"},
    {"image", true, kImageHelp},
    {"out", true, "output .npy file: float32 [num_positions, vocab] (required)"},
    {"prefill-chunk", true, "prefill chunk size in tokens (default 512)"},
    {"kv-cache-dtype", true,
     "latent cache rows: f32 (default, exact) | bf16 | fp8 (to measure what a format costs)"},
    {"cpu-matmul-precision", true, kCpuMatmulPrecisionHelp},
    {"quantization", true, kQuantizationHelp},
    TensorParallelSizeFlag(),
    TpSizeFlag(),
    DecodeContextParallelSizeFlag(),
    DcpSizeFlag(),
    {"log-level", true, "trace|debug|info|warn|error|off (default info)"},
};

absl::Status RunLogits(const Flags& flags) {
  RETURN_IF_ERROR(ApplyLogLevel(flags));
  const std::string ids_file = flags.GetOr("ids-file", ""), out = flags.GetOr("out", "");
  ASSIGN_OR_RETURN(int64_t chunk, flags.GetInt("prefill-chunk", 512, 1, 1 << 20));
  RETURN_IF_ERROR(ApplyCpuMatmulPrecision(flags.GetOr("cpu-matmul-precision", "f32")));
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, ReadIdsFile(ids_file));
  ASSIGN_OR_RETURN(LatentDType latent_dtype,
                   ParseKvCacheDType(flags.GetOr("kv-cache-dtype", "auto"), "cpu"));
  return RunOnModel(
      flags,
      [&](const engine::Model& model, engine::TensorParallelGroup* group,
          bool lead) -> absl::Status {
        std::vector<engine::MediaEmbedding> media;
        ASSIGN_OR_RETURN(const std::vector<int32_t> expanded,
                         PromptWithImages(model, ids, flags.GetAll("image"), &media));
        ASSIGN_OR_RETURN(std::vector<float> logits,
                         engine::PromptLogits(model, expanded, chunk, latent_dtype, group, media));
        if (!lead) return absl::OkStatus();
        const int64_t vocab = model.config().vocab_size;
        return WriteNpyF32(out, logits.data(), {static_cast<int64_t>(expanded.size()), vocab});
      });
}

const std::vector<FlagSpec> kQuantizeFlags = {
    {"model", true, "checkpoint directory to read (bf16 or f32 weights)"},
    {"out", true, "directory to write (must not exist; required)"},
    {"quantization", true,
     "mxfp4 (default): routed experts to MXFP4, K3's release format; int8: the projections and "
     "LM head (and bf16 experts) to int8 groups of 32; mxfp4,int8: both"},
    {"log-level", true, "trace|debug|info|warn|error|off (default info)"},
};

// Prints {"out", "matrices", "int8_matrices", "input_bytes", "output_bytes", "files", "seconds"}
// on stdout.
absl::Status RunQuantize(const Flags& flags) {
  RETURN_IF_ERROR(ApplyLogLevel(flags));
  const std::string model = flags.GetOr("model", ""), out = flags.GetOr("out", "");
  ASSIGN_OR_RETURN(const engine::WeightQuantization scheme,
                   engine::ParseWeightQuantization(flags.GetOr("quantization", "mxfp4")));
  if (scheme == engine::WeightQuantization::kCheckpoint) {
    return absl::InvalidArgumentError(
        "--quantization compressed-tensors: strata quantize writes mxfp4, int8 or mxfp4,int8");
  }
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(const engine::CheckpointQuantization q,
                   engine::QuantizeCheckpoint(model, out, scheme));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LOG_INFO("quantize", "{}: {} weights as MXFP4, {} as int8; {} -> {} in {} files, {:.1f} s", out,
           q.matrices - q.int8_matrices, q.int8_matrices, kvcache::FormatBytes(q.input_bytes),
           kvcache::FormatBytes(q.output_bytes), q.files, seconds);
  std::cout << nlohmann::json{{"out", out},
                              {"matrices", q.matrices},
                              {"int8_matrices", q.int8_matrices},
                              {"input_bytes", q.input_bytes},
                              {"output_bytes", q.output_bytes},
                              {"files", q.files},
                              {"seconds", seconds}}
                   .dump()
            << std::endl;
  return absl::OkStatus();
}

}  // namespace

const CommandSpec& GenerateSpec() {
  static const CommandSpec spec{
      .program = "strata",
      .command = "generate",
      .description = "generate token ids after --prompt-ids (JSON array on stdout)",
      .flags = kGenerateFlags,
      .required = {"prompt-ids"}};
  return spec;
}

int GenerateCommand(const std::vector<std::string>& args) {
  return RunCommand(GenerateSpec(), args, RunGenerate);
}

const CommandSpec& LogitsSpec() {
  static const CommandSpec spec{
      .program = "strata",
      .command = "logits",
      .description =
          "write float32 logits [positions, vocab] of --ids-file to --out (.npy); "
          "with --image, one row per position after each placeholder's expansion",
      .flags = kLogitsFlags,
      .required = {"ids-file", "out"}};
  return spec;
}

int LogitsCommand(const std::vector<std::string>& args) {
  return RunCommand(LogitsSpec(), args, RunLogits);
}

const CommandSpec& QuantizeSpec() {
  static const CommandSpec spec{
      .program = "strata",
      .command = "quantize",
      .description =
          "write --model's checkpoint with MXFP4 routed experts to --out (K3's release format)",
      .flags = kQuantizeFlags,
      .required = {"model", "out"},
      .synopsis = "--model DIR --out DIR [--quantization mxfp4|int8|mxfp4,int8] [flags]"};
  return spec;
}

int QuantizeCommand(const std::vector<std::string>& args) {
  return RunCommand(QuantizeSpec(), args, RunQuantize);
}

}  // namespace strata::cli
