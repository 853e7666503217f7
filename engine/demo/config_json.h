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
std::string BuildConfigJson(const ModelDims& dims);

}  // namespace strata::engine::demo
