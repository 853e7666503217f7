// The compressed-tensors `quantization_config` of what Strata writes and reads: MXFP4 routed
// experts (docs/checkpoint.md §6) as K3's release writes them, and int8 projections as `strata
// quantize --quantization int8` writes them. The checkpoint generator and `strata quantize` put it
// in config.json; model_config.cc reads it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::engine {

// compressed-tensor format names.
inline constexpr char kMxfp4Format[] = "mxfp4-pack-quantized";
inline constexpr char kInt8Format[] = "int-quantized";

// quant_method compressed-tensors, format mxfp4-pack-quantized, one group (4-bit float
// weights, group size 32, uint8 scales) targeting the routed experts' w1/w2/w3; the router,
// shared experts, latent projections, attention, dense MLPs and LM head ignored.
nlohmann::json Mxfp4QuantizationConfig();

// What `strata quantize` writes: the MXFP4 group above when `mxfp4_experts`, and when
// `int8_linears` a group of int8 weights (8-bit symmetric integers, group size 32, bf16 scales,
// `<module>.weight` int8 + `<module>.weight_scale`) targeting every Linear but those named in
// `not_int8` (module names: the MoE routers, MLA's kv_b_proj, odd widths…) and, with MXFP4, the
// routed experts. Format mixed-precision when both groups are present.
nlohmann::json QuantizationConfig(bool mxfp4_experts, bool int8_linears,
                                  const std::vector<std::string>& not_int8);

}  // namespace strata::engine
