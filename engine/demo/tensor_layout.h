// The tensors of a generated checkpoint: official names, shapes and dtypes (docs/checkpoint.md §3
// for K3, §4 for Kimi-Linear), each with the distribution its random values are drawn from.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "engine/demo/model_dims.h"
#include "engine/demo/weight_init.h"

namespace strata::engine::demo {

struct TensorSpec {
  std::string name;  // full on-disk name; for MXFP4 the module name without `.weight`
  DType dtype = DType::kBF16;
  Shape shape;  // logical [out, in] for MXFP4 weights
  InitSpec init;
  // Stored as `<name>.weight_packed` [out, in/2] U8 and `<name>.weight_scale` [out, in/32] U8.
  bool mxfp4 = false;
};

// Every tensor of the model described by `dims`, in a fixed order (model level, then layer by
// layer), then, with dims.vision, K3's `vision_tower.*` and `mm_projector.*` tensors.
std::vector<TensorSpec> ListTensors(const ModelDims& dims);

}  // namespace strata::engine::demo
