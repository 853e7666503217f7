#include "engine/quantization_config.h"

namespace strata::engine {

nlohmann::json Mxfp4QuantizationConfig() {
  using Json = nlohmann::json;
  Json weights = {
      {"num_bits", 4},     {"type", "float"},  {"strategy", "group"},         {"group_size", 32},
      {"symmetric", true}, {"dynamic", false}, {"scale_dtype", "torch.uint8"}};
  Json group = {{"format", "mxfp4-pack-quantized"},
                {"targets", {"re:.*block_sparse_moe\\.experts\\.\\d+\\.w[123]$"}},
                {"weights", std::move(weights)},
                {"input_activations", nullptr}};
  Json q = Json::object();
  q["quant_method"] = "compressed-tensors";
  q["format"] = "mxfp4-pack-quantized";
  q["quantization_status"] = "compressed";
  q["config_groups"] = {{"group_0", std::move(group)}};
  q["ignore"] = {"lm_head",
                 "re:.*self_attn\\..*",
                 "re:.*mlp\\..*",
                 "re:.*block_sparse_moe\\.gate$",
                 "re:.*block_sparse_moe\\.shared_experts\\..*",
                 "re:.*block_sparse_moe\\.routed_expert_.*",
                 "re:vision_tower\\..*",
                 "re:mm_projector\\..*"};
  return q;
}

}  // namespace strata::engine
