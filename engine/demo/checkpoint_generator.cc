#include "engine/demo/checkpoint_generator.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/mxfp4_quantize.h"
#include "core/status.h"
#include "engine/demo/config_json.h"
#include "engine/demo/tensor_layout.h"
#include "engine/demo/weight_init.h"
#include "engine/safetensors_writer.h"

namespace strata::engine::demo {
namespace {

namespace fs = std::filesystem;
using engine::TensorToWrite;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";
constexpr char kPreprocessorFile[] = "preprocessor_config.json";

// The on-disk tensors of one spec: one, or two (packed, scale) for an MXFP4 weight. An MXFP4
// weight draws from the seed of its unquantized name (`<module>.weight`), so the MXFP4 and bf16
// checkpoints of one seed hold the same underlying weights.
std::vector<TensorToWrite> Materialize(const TensorSpec& spec, uint64_t seed) {
  const int64_t count = NumElements(spec.shape);
  const std::string seed_name = spec.mxfp4 ? spec.name + ".weight" : spec.name;
  const std::vector<float> values = SampleValues(spec.init, count, TensorSeed(seed, seed_name));
  if (!spec.mxfp4) return {{spec.name, spec.dtype, spec.shape, EncodeValues(values, spec.dtype)}};
  const int64_t rows = spec.shape[0];
  const int64_t cols = spec.shape[1];
  Mxfp4Weights q = QuantizeMxfp4(values, rows, cols);
  std::vector<TensorToWrite> out;
  out.push_back({spec.name + ".weight_packed", DType::kU8, {rows, cols / 2}, std::move(q.packed)});
  out.push_back({spec.name + ".weight_scale",
                 DType::kU8,
                 {rows, cols / kMxfp4BlockSize},
                 std::move(q.scales)});
  return out;
}

int NumOutputs(const TensorSpec& spec) { return spec.mxfp4 ? 2 : 1; }

std::string ShardName(int shard, int num_shards) {
  if (num_shards == 1) return kSingleFile;
  return absl::StrFormat("model-%05d-of-%05d.safetensors", shard + 1, num_shards);
}

absl::Status WriteTextFile(const fs::path& path, const std::string& text) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return absl::InternalError("cannot create " + path.string());
  const bool ok = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  if (std::fclose(file) != 0 || !ok) return absl::InternalError("cannot write " + path.string());
  return absl::OkStatus();
}

bool IsCheckpointFile(const std::string& name) {
  return name == kSingleFile || name == kIndexFile || name == kPreprocessorFile ||
         (absl::StartsWith(name, "model-") && absl::StrContains(name, "-of-") &&
          absl::EndsWith(name, ".safetensors"));
}

absl::Status PrepareDirectory(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return absl::InternalError("cannot create " + dir.string() + ": " + error.message());
  std::vector<fs::path> stale;
  fs::directory_iterator it(dir, error);
  for (; !error && it != fs::directory_iterator(); it.increment(error)) {
    if (IsCheckpointFile(it->path().filename().string())) stale.push_back(it->path());
  }
  if (error) return absl::InternalError("cannot list " + dir.string() + ": " + error.message());
  for (const fs::path& path : stale) {
    if (!fs::remove(path, error)) return absl::InternalError("cannot remove " + path.string());
  }
  return absl::OkStatus();
}

// Writes shard `shard`: the on-disk tensors whose running index i has i % num_shards == shard
// (round robin, so one layer's tensors land in different files). Adds to `weight_map`.
absl::StatusOr<int64_t> WriteShard(const std::vector<TensorSpec>& specs, uint64_t seed, int shard,
                                   int num_shards, const fs::path& dir,
                                   nlohmann::json& weight_map) {
  const std::string file_name = ShardName(shard, num_shards);
  std::vector<TensorToWrite> tensors;
  int64_t index = 0;
  for (const TensorSpec& spec : specs) {
    const int outputs = NumOutputs(spec);
    bool wanted = false;
    for (int o = 0; o < outputs; ++o) wanted |= (index + o) % num_shards == shard;
    if (wanted) {
      std::vector<TensorToWrite> materialized = Materialize(spec, seed);
      for (int o = 0; o < outputs; ++o) {
        if ((index + o) % num_shards != shard) continue;
        weight_map[materialized[o].name] = file_name;
        tensors.push_back(std::move(materialized[o]));
      }
    }
    index += outputs;
  }
  int64_t data_bytes = 0;
  for (const TensorToWrite& tensor : tensors) data_bytes += tensor.bytes.size();
  RETURN_IF_ERROR(
      engine::WriteSafetensors((dir / file_name).string(), tensors, {{"format", "pt"}}));
  return data_bytes;
}

}  // namespace

absl::StatusOr<GeneratedCheckpoint> GenerateCheckpoint(const GeneratorOptions& options,
                                                       const std::string& out_dir) {
  GeneratedCheckpoint result;
  ASSIGN_OR_RETURN(result.dims, ResolveDims(options.family, options.preset, options.overrides,
                                            options.mxfp4_experts, options.vision));
  const std::vector<TensorSpec> specs = ListTensors(result.dims);
  int64_t num_outputs = 0;
  for (const TensorSpec& spec : specs) {
    num_outputs += NumOutputs(spec);
    result.num_parameters += NumElements(spec.shape);
    if (absl::StartsWith(spec.name, "vision_tower.") ||
        absl::StartsWith(spec.name, "mm_projector.")) {
      result.num_vision_parameters += NumElements(spec.shape);
    }
  }
  if (options.num_shards < 1 || options.num_shards > num_outputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards must be in 1..", num_outputs, ", got ", options.num_shards));
  }
  const fs::path dir(out_dir);
  RETURN_IF_ERROR(PrepareDirectory(dir));

  nlohmann::json weight_map = nlohmann::json::object();
  int64_t total_data_bytes = 0;
  for (int shard = 0; shard < options.num_shards; ++shard) {
    ASSIGN_OR_RETURN(int64_t data_bytes,
                     WriteShard(specs, options.seed, shard, options.num_shards, dir, weight_map));
    total_data_bytes += data_bytes;
    result.files.push_back(ShardName(shard, options.num_shards));
  }
  if (options.num_shards > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total_data_bytes}}},
                            {"weight_map", std::move(weight_map)}};
    RETURN_IF_ERROR(WriteTextFile(dir / kIndexFile, index.dump(2) + "\n"));
    result.files.push_back(kIndexFile);
  }
  RETURN_IF_ERROR(WriteTextFile(dir / "config.json", BuildConfigJson(result.dims)));
  result.files.push_back("config.json");
  if (result.dims.vision) {
    RETURN_IF_ERROR(
        WriteTextFile(dir / kPreprocessorFile, BuildPreprocessorConfigJson(result.dims)));
    result.files.push_back(kPreprocessorFile);
  }

  std::error_code error;
  for (const std::string& name : result.files) {
    const uintmax_t size = fs::file_size(dir / name, error);
    if (error) return absl::InternalError("cannot stat " + (dir / name).string());
    result.num_bytes += static_cast<int64_t>(size);
  }
  return result;
}

std::map<std::string, std::string> CudaShapeOverrides() {
  return {{"kda_head_dim", "128"},      {"kv_lora", "512"}, {"qk_rope", "64"},
          {"qk_nope", "128"},           {"v_head", "128"},  {"hidden", "256"},
          {"expert_intermediate", "64"}};
}

}  // namespace strata::engine::demo
