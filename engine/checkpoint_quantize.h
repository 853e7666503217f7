// `strata quantize`: a checkpoint directory rewritten with its bf16 routed experts as MXFP4, in
// K3's release format (docs/checkpoint.md §6: `<expert>.w{1,2,3}.weight_packed` / `.weight_scale`
// and a compressed-tensors `quantization_config`), and/or the Linears `--quantization int8` takes
// as int8 groups (`<module>.weight` int8 [out, in] + `<module>.weight_scale` bf16 [out, in/32],
// compressed-tensors format int-quantized), so that every later load reads the quantised bytes
// and skips quantising (llama.cpp's llama-quantize step, for this family). The bytes are exactly
// those `--quantization mxfp4|int8|mxfp4,int8` makes at load (engine/weight_quantize.h), but a
// tied LM head, which stays as stored here (int8 at load).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model.h"

namespace strata::engine {

struct CheckpointQuantization {
  int64_t matrices = 0;       // weights quantised
  int64_t int8_matrices = 0;  // of which int8 (the rest MXFP4 experts)
  int64_t input_bytes = 0;    // safetensors bytes read
  int64_t output_bytes = 0;   // safetensors bytes written
  int files = 0;              // safetensors files written
};

// Reads the checkpoint in `model_dir` and writes the quantised one to `out_dir`, which must
// not exist yet: shards as in the input (same names, tensors in the same order, the experts'
// tensors replaced by their packed codes and scales), the index's weight_map and total_size
// updated, config.json with quantization_config added (and inside text_config where the
// config nests one), every other top-level file copied (tokenizer, templates, generation
// config; subdirectories are not). Written into `<out_dir>.partial` and renamed when complete.
// `scheme`: kMxfp4, kInt8 or kMxfp4Int8 (over K3's release, whose experts are MXFP4 already,
// int8 and mxfp4,int8 both write the int8 part and keep the experts).
// Errors name what was wrong: the input not loadable, its experts MXFP4 already or absent (for
// mxfp4 alone), a tensor not bf16/f32 or of a width that is not a multiple of 32 (experts), a value
// infinite or NaN, nothing left to quantise, I/O.
absl::StatusOr<CheckpointQuantization> QuantizeCheckpoint(const std::string& model_dir,
                                                          const std::string& out_dir,
                                                          WeightQuantization scheme);

}  // namespace strata::engine
