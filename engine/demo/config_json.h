// config.json of a generated checkpoint, with the keys of the released configs
// (docs/checkpoint.md §2): K3 nests the language model under `text_config`; Kimi-Linear is flat.
#pragma once

#include <string>

#include "engine/demo/model_dims.h"

namespace strata::engine::demo {

// The config.json text (2-space indented) describing `dims`. With dims.mxfp4 it carries a
// compressed-tensors `quantization_config` (format mxfp4-pack-quantized, group size 32,
// routed experts only) both at the top level, where Hugging Face loaders look, and inside
// `text_config`, where some K3 ports look.
// With dims.vision it holds K3's `vision_config`; a K3 config always holds
// `media_placeholder_token_id` (ModelDims::media_placeholder_id()).
std::string BuildConfigJson(const ModelDims& dims);

// preprocessor_config.json of a checkpoint with a vision tower: the image budget
// (in_patch_limit, patch_limit_on_one_side 512), image_mean/std 0.5, patch_size and
// merge_kernel_size repeated from `vision_config`.
std::string BuildPreprocessorConfigJson(const ModelDims& dims);

}  // namespace strata::engine::demo
