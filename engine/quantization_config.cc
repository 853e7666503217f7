#include "engine/quantization_config.h"

namespace strata::engine {
namespace {

using Json = nlohmann::json;

constexpr char kExpertsTarget[] = "re:.*block_sparse_moe\\.experts\\.\\d+\\.w[123]$";

Json Mxfp4Group() {
  Json weights = {
      {"num_bits", 4},     {"type", "float"},  {"strategy", "group"},         {"group_size", 32},
      {"symmetric", true}, {"dynamic", false}, {"scale_dtype", "torch.uint8"}};
  return {{"format", kMxfp4Format},
          {"targets", {kExpertsTarget}},
          {"weights", std::move(weights)},
          {"input_activations", nullptr}};
}

Json Int8Group() {
  Json weights = {{"num_bits", 8},
                  {"type", "int"},
                  {"strategy", "group"},
                  {"group_size", 32},
                  {"symmetric", true},
                  {"dynamic", false},
                  {"scale_dtype", "torch.bfloat16"}};
  return {{"format", kInt8Format},
          {"targets", {"Linear"}},
          {"weights", std::move(weights)},
          {"input_activations", nullptr}};
}

Json Base(const char* format) {
  Json q = Json::object();
  q["quant_method"] = "compressed-tensors";
  q["format"] = format;
  q["quantization_status"] = "compressed";
  return q;
}

}  // namespace

Json Mxfp4QuantizationConfig() {
  Json q = Base(kMxfp4Format);
  q["config_groups"] = {{"group_0", Mxfp4Group()}};
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

Json QuantizationConfig(bool mxfp4_experts, bool int8_linears,
                        const std::vector<std::string>& not_int8) {
  if (!int8_linears) return Mxfp4QuantizationConfig();
  Json q = Base(mxfp4_experts ? "mixed-precision" : kInt8Format);
  q["config_groups"] = Json::object();
  if (mxfp4_experts) q["config_groups"]["group_0"] = Mxfp4Group();
  q["config_groups"][mxfp4_experts ? "group_1" : "group_0"] = Int8Group();
  Json ignore = Json::array();
  for (const std::string& module : not_int8) ignore.push_back(module);
  ignore.push_back("re:vision_tower\\..*");
  ignore.push_back("re:mm_projector\\..*");
  q["ignore"] = std::move(ignore);
  return q;
}

}  // namespace strata::engine
