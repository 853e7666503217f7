// The compressed-tensors `quantization_config` of MXFP4 routed experts (CHECKPOINT.md §6), as
// K3's release writes it. The checkpoint generator and `strata quantize` put it in config.json;
// model_config.cc reads it.
#pragma once

#include <nlohmann/json.hpp>

namespace strata::engine {

// quant_method compressed-tensors, format mxfp4-pack-quantized, one group (4-bit float
// weights, group size 32, uint8 scales) targeting the routed experts' w1/w2/w3; the router,
// shared experts, latent projections, attention, dense MLPs and LM head ignored.
nlohmann::json Mxfp4QuantizationConfig();

}  // namespace strata::engine
