// Generates official-layout checkpoints (config.json + safetensors, docs/checkpoint.md §2–§6) of
// either family with deterministic random weights, for tests, demos and benchmarks.
//
//   GeneratorOptions options{.family = "k3", .preset = "tiny", .seed = 7};
//   ASSIGN_OR_RETURN(GeneratedCheckpoint ckpt, GenerateCheckpoint(options, dir));
//
// Same options → byte-identical files. Each tensor's values depend only on (seed, tensor
// name), so a sharded checkpoint holds exactly the bytes of the single-file one, and an MXFP4
// checkpoint's routed experts are the quantized weights of the bf16 checkpoint of the same seed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/demo/model_dims.h"

namespace strata::engine::demo {

struct GeneratorOptions {
  std::string family;  // "k3" | "kimi-linear"; empty → the preset's (tiny, demo: k3; bench: k-l)
  std::string preset = "tiny";  // "tiny" | "demo" | "bench"
  uint64_t seed = 0;
  int num_shards = 1;  // 1 → model.safetensors; N > 1 → N shards + model.safetensors.index.json
  bool mxfp4_experts = false;  // K3 only: routed experts as MXFP4 + quantization_config
  // K3 only (InvalidArgument for Kimi-Linear): the vision tower, projector, `vision_config` and
  // preprocessor_config.json. The K3 demo preset always has them.
  bool vision = false;
  // `--set key=value` overrides of the preset (keys: OverrideKeys()). `layers` keeps the
  // pattern (every 4th layer and the last one MLA) unless `full_attn` lists the MLA layers.
  std::map<std::string, std::string> overrides;
};

struct GeneratedCheckpoint {
  ModelDims dims;
  int64_t num_parameters = 0;  // model weights; an MXFP4 matrix counts its [out, in] elements
  int64_t num_vision_parameters = 0;  // of which vision_tower.* and mm_projector.*
  int64_t num_bytes = 0;              // bytes of every file written (safetensors, config, index)
  std::vector<std::string> files;     // names written inside the output directory
};

// Writes the checkpoint into `out_dir` (created if needed). Stale `model.safetensors`,
// `model-*-of-*.safetensors`, index and preprocessor_config.json files already in `out_dir` are
// removed first so a directory never mixes two layouts. InvalidArgument for bad options, Internal
// for I/O errors.
absl::StatusOr<GeneratedCheckpoint> GenerateCheckpoint(const GeneratorOptions& options,
                                                       const std::string& out_dir);

// Overrides that give a preset the head shapes the CUDA kernels take (MLA latent 512 + 64, KDA
// head_dim 128) on a small hidden size (256; experts' intermediate 64): the CUDA tests'
// checkpoints. Callers add layers, vocab, topk, ...
std::map<std::string, std::string> CudaShapeOverrides();

}  // namespace strata::engine::demo
