#include "engine/model_config.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/quantization_config.h"

namespace strata::engine {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

// The key set of the Kimi-Linear-48B-A3B release config.json, with small sizes (7 layers,
// MLA at 4 and 7, hidden 96, 8 experts). The top-level head_dim (72) is the unused leftover.
constexpr char kKimiLinearConfig[] = R"json({
  "architectures": ["KimiLinearForCausalLM"],
  "auto_map": {
    "AutoConfig": "configuration_kimi.KimiLinearConfig",
    "AutoModel": "modeling_kimi.KimiLinearModel",
    "AutoModelForCausalLM": "modeling_kimi.KimiLinearForCausalLM"
  },
  "bos_token_id": 163584,
  "dtype": "bfloat16",
  "eos_token_id": 163586,
  "first_k_dense_replace": 1,
  "head_dim": 72,
  "hidden_act": "silu",
  "hidden_size": 96,
  "initializer_range": 0.02,
  "intermediate_size": 192,
  "kv_lora_rank": 32,
  "linear_attn_config": {
    "full_attn_layers": [4, 7],
    "head_dim": 16,
    "kda_layers": [1, 2, 3, 5, 6],
    "num_heads": 3,
    "short_conv_kernel_size": 4
  },
  "mla_use_nope": true,
  "model_max_length": 1048576,
  "model_type": "kimi_linear",
  "moe_intermediate_size": 48,
  "moe_layer_freq": 1,
  "moe_renormalize": true,
  "moe_router_activation_func": "sigmoid",
  "num_attention_heads": 2,
  "num_expert_group": 1,
  "num_experts": 8,
  "num_experts_per_token": 2,
  "num_hidden_layers": 7,
  "num_key_value_heads": 2,
  "num_nextn_predict_layers": 0,
  "num_shared_experts": 1,
  "pad_token_id": 163839,
  "q_lora_rank": null,
  "qk_nope_head_dim": 16,
  "qk_rope_head_dim": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "routed_scaling_factor": 2.446,
  "tie_word_embeddings": false,
  "topk_group": 1,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.56.2",
  "use_cache": true,
  "use_grouped_topk": true,
  "v_head_dim": 16,
  "vocab_size": 1000
})json";

// A K3-style config: language model under text_config, the released vision_config keys (small
// sizes) and MXFP4 quantization_config (compressed-tensors) at the top level, token ids at the
// top level.
constexpr char kK3Config[] = R"json({
  "architectures": ["KimiK3ForConditionalGeneration"],
  "auto_map": {"AutoConfig": "configuration_kimi_k3.KimiK3Config"},
  "model_type": "kimi_k3",
  "bos_token_id": 163584,
  "eos_token_id": 163585,
  "pad_token_id": 163839,
  "media_placeholder_token_id": 1013,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.57.1",
  "vision_config": {
    "_attn_implementation": "flash_attention_2",
    "activation_func": "gelu_pytorch_tanh",
    "attn_bias": false,
    "init_pos_emb_height": 8,
    "init_pos_emb_time": 4,
    "init_pos_emb_width": 6,
    "linear_bias": false,
    "merge_kernel_size": [2, 2],
    "merge_type": "sd2_tpool",
    "mlp_type": "mlp2",
    "mm_hidden_size": 32,
    "mm_projector_type": "patchmergerv2",
    "norm_type": "rmsnorm",
    "patch_embed_proj_bias": false,
    "patch_size": 14,
    "pos_emb_interpolation_mode": "bilinear",
    "pos_emb_type": "divided_fixed",
    "projector_hidden_act": "gelu",
    "projector_ln_eps": 1e-06,
    "qkv_hidden_size": 48,
    "text_hidden_size": 128,
    "vt_hidden_size": 32,
    "vt_intermediate_size": 64,
    "vt_num_attention_heads": 3,
    "vt_num_hidden_layers": 2
  },
  "quantization_config": {
    "config_groups": {
      "group_0": {
        "format": "mxfp4-pack-quantized",
        "input_activations": null,
        "output_activations": null,
        "targets": ["Linear"],
        "weights": {"group_size": 32, "num_bits": 4, "strategy": "group", "symmetric": true,
                    "type": "float"}
      }
    },
    "format": "mxfp4-pack-quantized",
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*"],
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed"
  },
  "text_config": {
    "model_type": "kimi_linear",
    "activation_situ_beta": 4.0,
    "activation_situ_linear_beta": 25.0,
    "attn_res_block_size": 2,
    "first_k_dense_replace": 1,
    "hidden_act": "situ",
    "hidden_size": 128,
    "intermediate_size": 320,
    "kv_lora_rank": 32,
    "latent_moe_use_norm": true,
    "linear_attn_config": {
      "full_attn_layers": [4, 5],
      "gate_lower_bound": -5.0,
      "head_dim": 32,
      "kda_layers": [1, 2, 3],
      "num_heads": 2,
      "short_conv_kernel_size": 3,
      "use_full_rank_gate": true
    },
    "max_position_embeddings": 1048576,
    "mla_use_nope": true,
    "mla_use_output_gate": true,
    "moe_intermediate_size": 64,
    "moe_layer_freq": 1,
    "moe_renormalize": true,
    "moe_router_activation_func": "sigmoid",
    "num_attention_heads": 2,
    "num_expert_group": 4,
    "num_experts": 16,
    "num_experts_per_token": 4,
    "num_hidden_layers": 5,
    "num_key_value_heads": 2,
    "num_nextn_predict_layers": 0,
    "num_shared_experts": 2,
    "q_lora_rank": 48,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "rms_norm_eps": 1e-06,
    "routed_expert_hidden_size": 64,
    "routed_scaling_factor": 1.5,
    "tie_word_embeddings": false,
    "topk_group": 2,
    "topk_method": "noaux_tc",
    "use_grouped_topk": true,
    "v_head_dim": 24,
    "vocab_size": 1024
  }
})json";

json KimiLinearJson() { return json::parse(kKimiLinearConfig); }
json K3Json() { return json::parse(kK3Config); }

absl::StatusOr<ModelConfig> Parse(const json& config) {
  return ParseModelConfig(config.dump(), "config.json");
}

// Parses `config` (which must parse) and returns Validate()'s verdict.
absl::Status ParseAndValidate(const json& config) {
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return parsed.status();
  return parsed->Validate();
}

TEST(ModelConfigTest, ParsesFlatKimiLinearReleaseKeys) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(kKimiLinearConfig, "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->Validate().ok()) << config->Validate();
  EXPECT_EQ(config->family, ModelFamily::kKimiLinear);
  EXPECT_EQ(config->tensor_prefix, "");
  EXPECT_EQ(config->vocab_size, 1000);
  EXPECT_EQ(config->hidden_size, 96);
  EXPECT_EQ(config->num_layers, 7);
  EXPECT_FLOAT_EQ(config->rms_norm_eps, 1e-5f);
  EXPECT_FALSE(config->tie_word_embeddings);
  // 1-based lists: layers 4 and 7 are MLA → 0-based 3 and 6.
  const std::vector<MixerKind> expected_mixers = {MixerKind::kKda, MixerKind::kKda, MixerKind::kKda,
                                                  MixerKind::kMla, MixerKind::kKda, MixerKind::kKda,
                                                  MixerKind::kMla};
  EXPECT_EQ(config->layer_mixer, expected_mixers);
  EXPECT_EQ(config->NumKdaLayers(), 5);
  EXPECT_EQ(config->NumMlaLayers(), 2);
  EXPECT_TRUE(config->IsKda(0));
  EXPECT_FALSE(config->IsKda(3));
  // KDA dims come from linear_attn_config, not from the top-level head_dim (72).
  EXPECT_EQ(config->kda.num_heads, 3);
  EXPECT_EQ(config->kda.head_dim, 16);
  EXPECT_EQ(config->kda.projection_size(), 48);
  EXPECT_EQ(config->kda.conv_kernel_size, 4);
  EXPECT_FALSE(config->kda.has_gate_lower_bound);
  EXPECT_FALSE(config->kda.use_full_rank_gate);
  EXPECT_EQ(config->mla.num_heads, 2);
  EXPECT_EQ(config->mla.q_lora_rank, 0);  // null
  EXPECT_EQ(config->mla.kv_lora_rank, 32);
  EXPECT_EQ(config->mla.qk_nope_head_dim, 16);
  EXPECT_EQ(config->mla.qk_rope_head_dim, 8);
  EXPECT_EQ(config->mla.v_head_dim, 16);
  EXPECT_EQ(config->mla.latent_dim(), 40);
  EXPECT_FALSE(config->mla.use_output_gate);
  EXPECT_EQ(config->intermediate_size, 192);
  EXPECT_EQ(config->activation, FfnActivation::kSwiGlu);
  EXPECT_EQ(config->moe.num_experts, 8);
  EXPECT_EQ(config->moe.num_experts_per_token, 2);
  EXPECT_EQ(config->moe.num_shared_experts, 1);
  EXPECT_EQ(config->moe.moe_intermediate_size, 48);
  EXPECT_TRUE(config->moe.renormalize);
  EXPECT_FLOAT_EQ(config->moe.routed_scaling_factor, 2.446f);
  EXPECT_EQ(config->moe.num_expert_group, 1);
  EXPECT_EQ(config->moe.topk_group, 1);
  EXPECT_EQ(config->moe.first_k_dense_replace, 1);
  EXPECT_FALSE(config->moe.is_latent());
  EXPECT_FALSE(config->moe.mxfp4_experts);
  EXPECT_FALSE(config->IsMoe(0));
  EXPECT_TRUE(config->IsMoe(1));
  EXPECT_FALSE(config->has_attn_res());
  EXPECT_EQ(config->max_position_embeddings, 1048576);
  EXPECT_EQ(config->bos_token_id, 163584);
  EXPECT_EQ(config->eos_token_id, 163586);
  EXPECT_EQ(config->pad_token_id, 163839);
}

TEST(ModelConfigTest, ParsesNestedK3TextConfig) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(kK3Config, "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->Validate().ok()) << config->Validate();
  EXPECT_EQ(config->family, ModelFamily::kKimiK3);
  EXPECT_EQ(config->tensor_prefix, "language_model.");
  EXPECT_EQ(config->vocab_size, 1024);
  EXPECT_EQ(config->hidden_size, 128);
  EXPECT_EQ(config->num_layers, 5);
  EXPECT_FLOAT_EQ(config->rms_norm_eps, 1e-6f);
  const std::vector<MixerKind> expected_mixers = {MixerKind::kKda, MixerKind::kKda, MixerKind::kKda,
                                                  MixerKind::kMla, MixerKind::kMla};
  EXPECT_EQ(config->layer_mixer, expected_mixers);
  EXPECT_EQ(config->kda.num_heads, 2);
  EXPECT_EQ(config->kda.head_dim, 32);
  EXPECT_EQ(config->kda.conv_kernel_size, 3);
  EXPECT_TRUE(config->kda.has_gate_lower_bound);
  EXPECT_FLOAT_EQ(config->kda.gate_lower_bound, -5.0f);
  EXPECT_TRUE(config->kda.use_full_rank_gate);
  EXPECT_EQ(config->mla.q_lora_rank, 48);
  EXPECT_EQ(config->mla.v_head_dim, 24);
  EXPECT_EQ(config->mla.qk_head_dim(), 48);
  EXPECT_TRUE(config->mla.use_output_gate);
  EXPECT_EQ(config->activation, FfnActivation::kSitu);
  EXPECT_FLOAT_EQ(config->situ_beta, 4.0f);
  EXPECT_FLOAT_EQ(config->situ_linear_beta, 25.0f);
  EXPECT_EQ(config->intermediate_size, 320);
  EXPECT_EQ(config->moe.num_experts, 16);
  EXPECT_EQ(config->moe.num_experts_per_token, 4);
  EXPECT_EQ(config->moe.num_shared_experts, 2);
  EXPECT_EQ(config->moe.num_expert_group, 4);
  EXPECT_EQ(config->moe.topk_group, 2);
  EXPECT_FLOAT_EQ(config->moe.routed_scaling_factor, 1.5f);
  EXPECT_EQ(config->moe.routed_expert_hidden_size, 64);
  EXPECT_TRUE(config->moe.is_latent());
  EXPECT_TRUE(config->moe.latent_use_norm);
  EXPECT_TRUE(config->moe.mxfp4_experts);
  EXPECT_EQ(config->attn_res_block_size, 2);
  EXPECT_TRUE(config->has_attn_res());
  EXPECT_EQ(config->max_position_embeddings, 1048576);
  // Token ids live at the top level of the K3 config.
  EXPECT_EQ(config->bos_token_id, 163584);
  EXPECT_EQ(config->eos_token_id, 163585);
  EXPECT_EQ(config->pad_token_id, 163839);
  EXPECT_EQ(config->media_placeholder_token_id, 1013);
  ASSERT_TRUE(config->vision.has_value());
}

TEST(ModelConfigTest, AbsentOptionalKeysTakeDocumentedDefaults) {
  json config = KimiLinearJson();
  for (const char* key : {"num_expert_group", "topk_group", "bos_token_id", "eos_token_id",
                          "pad_token_id", "model_max_length", "tie_word_embeddings"}) {
    config.erase(key);
  }
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->Validate().ok());
  EXPECT_EQ(parsed->moe.num_expert_group, 1);
  EXPECT_EQ(parsed->moe.topk_group, 1);
  EXPECT_FALSE(parsed->kda.use_full_rank_gate);
  EXPECT_FALSE(parsed->mla.use_output_gate);
  EXPECT_EQ(parsed->moe.routed_expert_hidden_size, 0);
  EXPECT_FALSE(parsed->moe.latent_use_norm);
  EXPECT_EQ(parsed->situ_linear_beta, 0.0f);
  EXPECT_EQ(parsed->attn_res_block_size, 0);
  EXPECT_FALSE(parsed->tie_word_embeddings);
  EXPECT_EQ(parsed->bos_token_id, -1);
  EXPECT_EQ(parsed->eos_token_id, -1);
  EXPECT_EQ(parsed->pad_token_id, -1);
  EXPECT_EQ(parsed->media_placeholder_token_id, -1);
  EXPECT_FALSE(parsed->vision.has_value());
  EXPECT_EQ(parsed->max_position_embeddings, 0);
}

TEST(ModelConfigTest, NullGateLowerBoundCountsAsAbsent) {
  json config = K3Json();
  config["text_config"]["linear_attn_config"]["gate_lower_bound"] = nullptr;
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->kda.has_gate_lower_bound);
}

TEST(ModelConfigTest, TokenIdsMayBeInTextConfigOrLists) {
  json config = K3Json();
  config.erase("bos_token_id");
  config["text_config"]["bos_token_id"] = 7;
  config["eos_token_id"] = {11, 12};
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->bos_token_id, 7);
  EXPECT_EQ(parsed->eos_token_id, 11);
}

TEST(ModelConfigTest, HiddenActSpellings) {
  json config = KimiLinearJson();
  config["hidden_act"] = "swiglu";
  absl::StatusOr<ModelConfig> swiglu = Parse(config);
  ASSERT_TRUE(swiglu.ok()) << swiglu.status();
  EXPECT_EQ(swiglu->activation, FfnActivation::kSwiGlu);

  config["hidden_act"] = "situ";
  absl::StatusOr<ModelConfig> situ = Parse(config);
  ASSERT_TRUE(situ.ok()) << situ.status();
  EXPECT_EQ(situ->activation, FfnActivation::kSitu);

  config["hidden_act"] = "gelu";
  absl::StatusOr<ModelConfig> gelu = Parse(config);
  ASSERT_FALSE(gelu.ok());
  EXPECT_EQ(gelu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gelu.status().message(), HasSubstr("config.json: hidden_act must be"));
  EXPECT_THAT(gelu.status().message(), HasSubstr("\"gelu\""));
}

TEST(ModelConfigTest, Mxfp4DetectedInTextConfigToo) {
  json config = K3Json();
  config["text_config"]["quantization_config"] = config["quantization_config"];
  config.erase("quantization_config");
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->moe.mxfp4_experts);
}

TEST(ModelConfigTest, Mxfp4DetectedFromGroupFormatAlone) {
  json config = K3Json();
  config["quantization_config"].erase("format");
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->moe.mxfp4_experts);
}

TEST(ModelConfigTest, NoQuantizationConfigMeansPlainExperts) {
  json config = K3Json();
  config.erase("quantization_config");
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->moe.mxfp4_experts);
}

// What `strata quantize --quantization int8|mxfp4,int8` writes: int8 groups alone (the experts
// stay plain), or mixed with the MXFP4 experts.
TEST(ModelConfigTest, Int8GroupsAreReadAndMixedWithMxfp4) {
  json config = K3Json();
  config["quantization_config"] = QuantizationConfig(false, true, {"lm_head"});
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->moe.mxfp4_experts);
  config["quantization_config"] = QuantizationConfig(true, true, {});
  parsed = Parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->moe.mxfp4_experts);
  // A group in a format Strata does not read is refused, even next to one it does.
  config["quantization_config"]["config_groups"]["group_2"] = {{"format", "pack-quantized"}};
  parsed = Parse(config);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("int-quantized"));
}

TEST(ModelConfigTest, OtherQuantizationIsRejected) {
  json config = K3Json();
  config["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}};
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("quantization_config"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("\"fp8\""));
}

TEST(ModelConfigTest, RejectsMissingRequiredKeyWithItsPath) {
  json flat = KimiLinearJson();
  flat.erase("hidden_size");
  EXPECT_THAT(Parse(flat).status().message(),
              HasSubstr("config.json: missing required key hidden_size"));

  json nested = K3Json();
  nested["text_config"]["linear_attn_config"].erase("num_heads");
  EXPECT_THAT(Parse(nested).status().message(),
              HasSubstr("missing required key text_config.linear_attn_config.num_heads"));

  json no_text = K3Json();
  no_text.erase("text_config");
  EXPECT_THAT(Parse(no_text).status().message(), HasSubstr("missing required key text_config"));
}

TEST(ModelConfigTest, RejectsWrongTypes) {
  json config = KimiLinearJson();
  config["hidden_size"] = "96";
  EXPECT_THAT(Parse(config).status().message(),
              HasSubstr("hidden_size must be an integer, found string \"96\""));

  config = KimiLinearJson();
  config["linear_attn_config"]["kda_layers"] = {1, 2, 2.5};
  EXPECT_THAT(Parse(config).status().message(),
              HasSubstr("linear_attn_config.kda_layers[2] must be an integer"));

  config = KimiLinearJson();
  config["num_experts"] = 1e12;
  EXPECT_THAT(Parse(config).status().message(), HasSubstr("num_experts must be an integer"));

  config = KimiLinearJson();
  config["num_experts"] = int64_t{1} << 40;
  EXPECT_THAT(Parse(config).status().message(), HasSubstr("num_experts must fit in a 32-bit int"));
}

TEST(ModelConfigTest, RejectsUnknownModelTypeAndBadJson) {
  json config = KimiLinearJson();
  config["model_type"] = "deepseek_v3";
  EXPECT_THAT(Parse(config).status().message(),
              HasSubstr("model_type must be \"kimi_k3\" or \"kimi_linear\""));
  EXPECT_THAT(ParseModelConfig("{\"model_type\": ", "x/config.json").status().message(),
              HasSubstr("x/config.json: not valid JSON"));
  EXPECT_THAT(ParseModelConfig("[1, 2]", "config.json").status().message(),
              HasSubstr("expected a JSON object"));
}

// ---- Validate(): layer lists ------------------------------------------------------------------

struct LayerListCase {
  std::vector<int> kda;
  std::vector<int> full;
  std::string message;
};

TEST(ModelConfigValidateTest, LayerListsMustPartitionAllLayers) {
  const LayerListCase cases[] = {
      {{1, 2, 3, 5, 5, 6},
       {4, 7},
       "config.json: linear_attn_config.kda_layers lists layer 5 twice"},
      {{1, 2, 3, 5, 6}, {4, 7, 7}, "linear_attn_config.full_attn_layers lists layer 7 twice"},
      {{1, 2, 3, 5}, {4, 7}, "config.json: linear_attn_config does not list layer 6"},
      {{1, 2, 3, 5, 6}, {4, 8}, "linear_attn_config.full_attn_layers lists layer 8, outside 1..7"},
      {{0, 1, 2, 3, 5, 6}, {4, 7}, "linear_attn_config.kda_layers lists layer 0, outside 1..7"},
      {{1, 2, 3, 5, 6},
       {4, 5, 7},
       "linear_attn_config.full_attn_layers lists layer 5, which linear_attn_config.kda_layers "
       "also lists"},
      {{}, {}, "does not list layer 1"},
  };
  for (const LayerListCase& c : cases) {
    json config = KimiLinearJson();
    config["linear_attn_config"]["kda_layers"] = c.kda;
    config["linear_attn_config"]["full_attn_layers"] = c.full;
    absl::Status status = ParseAndValidate(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
}

TEST(ModelConfigValidateTest, LayerListsMayBeUnorderedAndAllOneKind) {
  json config = KimiLinearJson();
  config["linear_attn_config"]["kda_layers"] = json::array();
  config["linear_attn_config"]["full_attn_layers"] = {7, 1, 3, 2, 6, 5, 4};
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->Validate().ok()) << parsed->Validate();
  EXPECT_EQ(parsed->NumMlaLayers(), 7);
}

TEST(ModelConfigValidateTest, K3MessagesNameTheTextConfigPath) {
  json config = K3Json();
  config["text_config"]["linear_attn_config"]["kda_layers"] = {1, 2, 2, 3};
  EXPECT_THAT(ParseAndValidate(config).message(),
              HasSubstr("config.json: text_config.linear_attn_config.kda_layers lists layer 2 "
                        "twice"));
}

// ---- Validate(): sizes, routing, MXFP4 --------------------------------------------------------

struct SizeCase {
  std::vector<std::string> path;  // key path from the language-model object
  json value;
  std::string message;
};

void ExpectRejected(json config, const std::vector<std::string>& path, const json& value,
                    const std::string& message) {
  json* node = &config;
  for (size_t i = 0; i + 1 < path.size(); ++i) node = &(*node)[path[i]];
  (*node)[path.back()] = value;
  absl::Status status = ParseAndValidate(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << message;
  EXPECT_THAT(status.message(), HasSubstr(message));
}

TEST(ModelConfigValidateTest, RejectsNonPositiveSizes) {
  const SizeCase cases[] = {
      {{"vocab_size"}, 0, "config.json: vocab_size must be positive, found 0"},
      {{"vocab_size"}, int64_t{1} << 31, "vocab_size = 2147483648 does not fit in a 32-bit int"},
      {{"hidden_size"}, -4, "config.json: hidden_size must be positive, found -4"},
      {{"num_hidden_layers"}, 0, "num_hidden_layers must be positive, found 0"},
      {{"num_hidden_layers"}, 70000, "num_hidden_layers must be at most 65536, found 70000"},
      {{"linear_attn_config", "num_heads"}, 0, "linear_attn_config.num_heads must be positive"},
      {{"linear_attn_config", "head_dim"}, -1, "linear_attn_config.head_dim must be positive"},
      {{"num_attention_heads"}, 0, "num_attention_heads must be positive, found 0"},
      {{"kv_lora_rank"}, 0, "kv_lora_rank must be positive"},
      {{"qk_nope_head_dim"}, 0, "qk_nope_head_dim must be positive"},
      {{"v_head_dim"}, 0, "v_head_dim must be positive"},
      {{"q_lora_rank"}, -2, "q_lora_rank must be at least 0, found -2"},
      {{"num_experts"}, 0, "num_experts must be positive"},
      {{"num_experts_per_token"}, 0, "num_experts_per_token must be positive"},
      {{"moe_intermediate_size"}, 0, "moe_intermediate_size must be positive"},
      {{"intermediate_size"}, 0, "intermediate_size must be positive"},
      {{"moe_layer_freq"}, 0, "moe_layer_freq must be positive"},
      {{"num_expert_group"}, 0, "num_expert_group must be positive"},
      {{"linear_attn_config", "short_conv_kernel_size"},
       0,
       "linear_attn_config.short_conv_kernel_size must be positive, found 0"},
      {{"rms_norm_eps"}, 0.0, "rms_norm_eps must be a positive finite number, found 0"},
      {{"rms_norm_eps"}, -1e-5, "rms_norm_eps must be a positive finite number"},
  };
  for (const SizeCase& c : cases) ExpectRejected(KimiLinearJson(), c.path, c.value, c.message);
}

TEST(ModelConfigValidateTest, RejectsInconsistentRouting) {
  // 8 experts in the Kimi-Linear test config.
  const SizeCase cases[] = {
      {{"num_experts_per_token"},
       9,
       "num_experts_per_token must be at most num_experts = 8, found 9"},
      {{"num_expert_group"}, 3, "num_expert_group must divide num_experts = 8, found 3"},
      {{"topk_group"}, 2, "topk_group must be at most num_expert_group = 1, found 2"},
      {{"topk_group"}, 0, "topk_group must be positive"},
  };
  for (const SizeCase& c : cases) ExpectRejected(KimiLinearJson(), c.path, c.value, c.message);

  // 4 groups of 2 experts, 1 group kept: at most 2 experts reachable.
  json grouped = KimiLinearJson();
  grouped["num_expert_group"] = 4;
  grouped["topk_group"] = 1;
  ExpectRejected(grouped, {"num_experts_per_token"}, 3,
                 "num_experts_per_token must be at most topk_group * experts per group = 2, "
                 "found 3");
  grouped["num_experts_per_token"] = 2;  // the boundary itself is fine
  EXPECT_TRUE(ParseAndValidate(grouped).ok()) << ParseAndValidate(grouped);
}

TEST(ModelConfigValidateTest, Mxfp4WidthsMustBeMultiplesOf32) {
  // K3 (latent experts, MXFP4): L_d = 64 and I = 64 are fine.
  ExpectRejected(K3Json(), {"text_config", "routed_expert_hidden_size"}, 48,
                 "config.json: text_config.routed_expert_hidden_size must be a multiple of 32");
  ExpectRejected(K3Json(), {"text_config", "moe_intermediate_size"}, 40,
                 "text_config.moe_intermediate_size must be a multiple of 32");
  // Without a latent width the experts run on the full hidden size.
  json full_width = K3Json();
  full_width["text_config"].erase("routed_expert_hidden_size");
  ExpectRejected(full_width, {"text_config", "hidden_size"}, 100,
                 "text_config.hidden_size must be a multiple of 32");
  // The same widths are fine for unquantized experts.
  json plain = K3Json();
  plain.erase("quantization_config");
  plain["text_config"]["routed_expert_hidden_size"] = 48;
  plain["text_config"]["moe_intermediate_size"] = 40;
  EXPECT_TRUE(ParseAndValidate(plain).ok()) << ParseAndValidate(plain);
}

TEST(ModelConfigValidateTest, RejectsRopeMla) {
  json config = KimiLinearJson();
  config["mla_use_nope"] = false;
  absl::Status status = ParseAndValidate(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("config.json: mla_use_nope must be true"));
  EXPECT_THAT(status.message(), HasSubstr("RoPE"));
  config.erase("mla_use_nope");
  EXPECT_TRUE(ParseAndValidate(config).ok());
}

TEST(ModelConfigValidateTest, RejectsNonNegativeGateLowerBound) {
  ExpectRejected(K3Json(), {"text_config", "linear_attn_config", "gate_lower_bound"}, 0.5,
                 "text_config.linear_attn_config.gate_lower_bound must be negative");
}

TEST(ModelConfigValidateTest, RejectsProductsBeyondInt) {
  ExpectRejected(KimiLinearJson(), {"linear_attn_config", "head_dim"}, 1 << 30,
                 "linear_attn_config.num_heads * head_dim = 3221225472 does not fit");
}

// ---- K3 vision_config and preprocessor_config.json --------------------------------------------

TEST(ModelConfigVisionTest, ParsesTheReleasedVisionKeys) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(kK3Config, "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->Validate().ok()) << config->Validate();
  ASSERT_TRUE(config->vision.has_value());
  const VisionConfig& v = *config->vision;
  EXPECT_EQ(v.patch_size, 14);
  EXPECT_EQ(v.hidden_size, 32);
  EXPECT_EQ(v.qkv_hidden_size, 48);
  EXPECT_EQ(v.num_heads, 3);
  EXPECT_EQ(v.head_dim(), 16);
  EXPECT_EQ(v.intermediate_size, 64);
  EXPECT_EQ(v.num_layers, 2);
  EXPECT_EQ(v.pos_emb_height, 8);
  EXPECT_EQ(v.pos_emb_width, 6);
  EXPECT_EQ(v.merge_height, 2);
  EXPECT_EQ(v.merge_width, 2);
  EXPECT_EQ(v.merge_size(), 4);
  EXPECT_EQ(v.mm_hidden_size, 32);
  EXPECT_EQ(v.text_hidden_size, 128);
  EXPECT_FLOAT_EQ(v.projector_ln_eps, 1e-6f);
  // No preprocessor_config.json: the released image budget.
  EXPECT_EQ(v.in_patch_limit, 65536);
  EXPECT_EQ(v.patch_limit_on_one_side, 512);
  EXPECT_EQ(v.max_side_pixels(), 7168);
  EXPECT_EQ(v.image_mean, (std::array<float, 3>{0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(v.image_std, (std::array<float, 3>{0.5f, 0.5f, 0.5f}));
}

TEST(ModelConfigVisionTest, AbsentSwitchesTakeTheReleasedValues) {
  json config = K3Json();
  for (const char* key :
       {"patch_size", "init_pos_emb_height", "init_pos_emb_width", "merge_kernel_size", "norm_type",
        "attn_bias", "linear_bias", "patch_embed_proj_bias", "pos_emb_interpolation_mode",
        "merge_type", "mm_projector_type", "activation_func", "projector_hidden_act",
        "projector_ln_eps"}) {
    config["vision_config"].erase(key);
  }
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->Validate().ok()) << parsed->Validate();
  EXPECT_EQ(parsed->vision->patch_size, 14);
  EXPECT_EQ(parsed->vision->pos_emb_height, 64);
  EXPECT_EQ(parsed->vision->pos_emb_width, 64);
  EXPECT_EQ(parsed->vision->merge_size(), 4);
  EXPECT_FLOAT_EQ(parsed->vision->projector_ln_eps, 1e-5f);
}

TEST(ModelConfigVisionTest, NoVisionConfigMeansTextOnly) {
  json k3 = K3Json();
  k3.erase("vision_config");
  absl::StatusOr<ModelConfig> parsed = Parse(k3);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->Validate().ok()) << parsed->Validate();
  EXPECT_FALSE(parsed->vision.has_value());
  EXPECT_EQ(parsed->media_placeholder_token_id, 1013);

  k3["vision_config"] = nullptr;
  parsed = Parse(k3);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->vision.has_value());

  // Kimi-Linear has no vision path: a vision_config there is ignored.
  json flat = KimiLinearJson();
  flat["vision_config"] = {{"norm_type", "layernorm"}};
  parsed = Parse(flat);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->vision.has_value());

  k3 = K3Json();
  k3["vision_config"] = 3;
  EXPECT_THAT(Parse(k3).status().message(),
              HasSubstr("vision_config must be an object, found integer 3"));
}

TEST(ModelConfigVisionTest, PlaceholderIdMayBeInTextConfig) {
  json config = K3Json();
  config.erase("media_placeholder_token_id");
  config["text_config"]["media_placeholder_token_id"] = 1000;
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->media_placeholder_token_id, 1000);
  EXPECT_TRUE(parsed->Validate().ok()) << parsed->Validate();
}

struct VisionRefusal {
  std::string key;
  json value;
  std::string message;
};

TEST(ModelConfigVisionTest, ParseRefusesWhatStrataDoesNotImplement) {
  const std::vector<VisionRefusal> cases = {
      {"norm_type", "layernorm",
       "config.json: vision_config.norm_type must be \"rmsnorm\" (the only normalisation "
       "implemented), found \"layernorm\""},
      {"attn_bias", true, "config.json: vision_config.attn_bias must be false, found true"},
      {"linear_bias", true, "vision_config.linear_bias must be false, found true"},
      {"patch_embed_proj_bias", true,
       "vision_config.patch_embed_proj_bias must be false, found true"},
      {"pos_emb_interpolation_mode", "bicubic",
       "vision_config.pos_emb_interpolation_mode must be \"bilinear\""},
      {"merge_type", "sd2", "vision_config.merge_type must be \"sd2_tpool\""},
      {"mm_projector_type", "patchmerger",
       "vision_config.mm_projector_type must be \"patchmergerv2\""},
      {"activation_func", "quick_gelu",
       "vision_config.activation_func must be \"gelu_pytorch_tanh\""},
      {"projector_hidden_act", "gelu_pytorch_tanh",
       "vision_config.projector_hidden_act must be \"gelu\""},
      {"vt_hidden_size", "32", "vision_config.vt_hidden_size must be an integer, found string"},
      {"attn_bias", 0, "vision_config.attn_bias must be true or false, found integer 0"},
      {"merge_kernel_size", json::array({2}),
       "vision_config.merge_kernel_size must be a list of 2 integers [height, width], found 1"},
  };
  for (const VisionRefusal& c : cases) {
    json config = K3Json();
    config["vision_config"][c.key] = c.value;
    absl::StatusOr<ModelConfig> parsed = Parse(config);
    ASSERT_FALSE(parsed.ok()) << c.key;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.key;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.message)) << c.key;
  }
  for (const char* key :
       {"vt_hidden_size", "qkv_hidden_size", "vt_num_attention_heads", "vt_intermediate_size",
        "vt_num_hidden_layers", "mm_hidden_size", "text_hidden_size"}) {
    json config = K3Json();
    config["vision_config"].erase(key);
    EXPECT_THAT(Parse(config).status().message(),
                HasSubstr(std::string("config.json: missing required key vision_config.") + key));
  }
}

TEST(ModelConfigVisionTest, ValidateChecksTheSizes) {
  const std::vector<VisionRefusal> cases = {
      {"qkv_hidden_size", 50,
       "config.json: vision_config.qkv_hidden_size must be divisible by "
       "vt_num_attention_heads = 3, found 50"},
      {"qkv_hidden_size", 42,
       "vision_config.qkv_hidden_size / vt_num_attention_heads (head_dim) must be a multiple of "
       "4 (the 2-D RoPE rotates groups of 4), found 42 / 3 = 14"},
      {"merge_kernel_size", json::array({3, 3}),
       "vision_config.merge_kernel_size must be [2, 2] (merge_type sd2_tpool), found [3, 3]"},
      {"merge_kernel_size", json::array({2, 1}), "must be [2, 2]"},
      {"mm_hidden_size", 64,
       "vision_config.mm_hidden_size must equal vt_hidden_size = 32 (the projector's input), "
       "found 64"},
      {"text_hidden_size", 7168,
       "vision_config.text_hidden_size must equal the language model's hidden_size = 128, found "
       "7168"},
      {"vt_num_attention_heads", 0,
       "vision_config.vt_num_attention_heads must be positive, found 0"},
      {"vt_num_hidden_layers", -1, "vision_config.vt_num_hidden_layers must be positive"},
      {"init_pos_emb_width", 0, "vision_config.init_pos_emb_width must be positive"},
      {"patch_size", 0, "vision_config.patch_size must be positive"},
      {"projector_ln_eps", 0.0, "vision_config.projector_ln_eps must be a positive"},
      {"qkv_hidden_size", 1 << 30, "vision_config.qkv_hidden_size * 3 = 3221225472 does not fit"},
  };
  for (const VisionRefusal& c : cases) {
    json config = K3Json();
    config["vision_config"][c.key] = c.value;
    if (c.key == "vt_num_attention_heads") config["vision_config"]["qkv_hidden_size"] = 48;
    if (c.key == "qkv_hidden_size" && c.value == json(1 << 30)) {
      config["vision_config"]["vt_num_attention_heads"] = 1 << 28;  // head_dim 4
    }
    const absl::Status status = ParseAndValidate(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.key << " " << c.value;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.key << " " << c.value;
  }
}

TEST(ModelConfigVisionTest, PlaceholderIdMustBeInTheVocabulary) {
  json config = K3Json();
  config["media_placeholder_token_id"] = 163605;  // the release's id, outside vocab 1024
  EXPECT_THAT(ParseAndValidate(config).message(),
              HasSubstr("config.json: media_placeholder_token_id must be a token id in 0..1023 "
                        "(vocab_size 1024) when vision_config is present, found 163605"));
  config.erase("media_placeholder_token_id");
  EXPECT_THAT(ParseAndValidate(config).message(),
              HasSubstr("media_placeholder_token_id must be a token id in 0..1023 (vocab_size "
                        "1024) when vision_config is present, found none"));
  config.erase("vision_config");  // text only: the id is not needed
  EXPECT_TRUE(ParseAndValidate(config).ok());

  // A vision config on a Kimi-Linear ModelConfig (built in code) is refused.
  absl::StatusOr<ModelConfig> flat = Parse(KimiLinearJson());
  ASSERT_TRUE(flat.ok());
  absl::StatusOr<ModelConfig> k3 = Parse(K3Json());
  ASSERT_TRUE(k3.ok());
  flat->vision = k3->vision;
  flat->media_placeholder_token_id = 5;
  EXPECT_THAT(flat->Validate().message(), HasSubstr("vision_config is supported for Kimi K3"));
}

absl::StatusOr<ModelConfig> ParseWithPreprocessor(const json& config, const std::string& text) {
  return ParseModelConfig(config.dump(), "config.json", &text, "dir/preprocessor_config.json");
}

TEST(ModelConfigVisionTest, ReadsTheImageBudgetOfPreprocessorConfig) {
  const std::string text = R"json({
    "in_patch_limit": 1024, "patch_limit_on_one_side": 64,
    "image_mean": [0.25, 0.5, 0.75], "image_std": [0.5, 0.25, 1],
    "patch_size": 14, "merge_kernel_size": 2, "processor_class": "KimiK3Processor"})json";
  absl::StatusOr<ModelConfig> parsed = ParseWithPreprocessor(K3Json(), text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->Validate().ok()) << parsed->Validate();
  const VisionConfig& v = *parsed->vision;
  EXPECT_EQ(v.in_patch_limit, 1024);
  EXPECT_EQ(v.patch_limit_on_one_side, 64);
  EXPECT_EQ(v.max_side_pixels(), 64 * 14);
  EXPECT_EQ(v.image_mean, (std::array<float, 3>{0.25f, 0.5f, 0.75f}));
  EXPECT_EQ(v.image_std, (std::array<float, 3>{0.5f, 0.25f, 1.0f}));

  // The keys may sit under media_proc_cfg; absent keys keep the released values.
  parsed = ParseWithPreprocessor(K3Json(), R"({"media_proc_cfg": {"in_patch_limit": 4096}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->vision->in_patch_limit, 4096);
  EXPECT_EQ(parsed->vision->patch_limit_on_one_side, 512);

  // Without a vision_config the file is not read at all.
  json text_only = K3Json();
  text_only.erase("vision_config");
  const std::string garbage = "{not json";
  parsed = ParseModelConfig(text_only.dump(), "config.json", &garbage, "p.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->vision.has_value());
}

TEST(ModelConfigVisionTest, RefusesABadPreprocessorConfig) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "dir/preprocessor_config.json: not valid JSON"},
      {"[1]", "dir/preprocessor_config.json: expected a JSON object, found an array"},
      {R"({"in_patch_limit": "many"})",
       "dir/preprocessor_config.json: in_patch_limit must be an integer, found string"},
      {R"({"image_mean": [0.5, 0.5]})",
       "dir/preprocessor_config.json: image_mean must list 3 numbers (R, G, B), found 2"},
      {R"({"media_proc_cfg": {"image_std": ["a", 1, 1]}})",
       "media_proc_cfg.image_std[0] must be a number, found string"},
      {R"({"patch_size": 16})",
       "patch_size must agree with config.json's vision_config.patch_size = 14, found 16"},
      {R"({"merge_kernel_size": [2, 3]})",
       "merge_kernel_size must agree with config.json's vision_config.merge_kernel_size = 2, "
       "found 3"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<ModelConfig> parsed = ParseWithPreprocessor(K3Json(), text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_THAT(parsed.status().message(), HasSubstr(message)) << text;
  }
  const std::vector<std::pair<std::string, std::string>> invalid = {
      {R"({"in_patch_limit": 3})",
       "preprocessor_config.json: in_patch_limit must be at least 4 (one merged row), found 3"},
      {R"({"patch_limit_on_one_side": 1})",
       "preprocessor_config.json: patch_limit_on_one_side must be at least 2"},
      {R"({"image_std": [0.5, 0, 0.5]})",
       "preprocessor_config.json: image_std must be positive and image_mean finite, found "
       "channel 1"},
  };
  for (const auto& [text, message] : invalid) {
    absl::StatusOr<ModelConfig> parsed = ParseWithPreprocessor(K3Json(), text);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_THAT(parsed->Validate().message(), HasSubstr(message)) << text;
  }
}

TEST(ModelConfigVisionTest, LoadReadsPreprocessorConfigWhenPresent) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "strata_model_config_vision_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "config.json");
    out << kK3Config;
  }
  std::filesystem::remove(dir / "preprocessor_config.json");
  absl::StatusOr<ModelConfig> config = LoadModelConfig(dir.string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->vision->in_patch_limit, 65536);  // missing file: the released budget
  {
    std::ofstream out(dir / "preprocessor_config.json");
    out << R"({"in_patch_limit": 2048, "patch_limit_on_one_side": 100})";
  }
  config = LoadModelConfig(dir.string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->vision->in_patch_limit, 2048);
  EXPECT_EQ(config->vision->patch_limit_on_one_side, 100);
  {
    std::ofstream out(dir / "preprocessor_config.json");
    out << R"({"in_patch_limit": true})";
  }
  config = LoadModelConfig(dir.string());
  EXPECT_THAT(config.status().message(),
              HasSubstr((dir / "preprocessor_config.json").string() +
                        ": in_patch_limit must be an integer, found true"));
  std::filesystem::remove_all(dir);
}

TEST(ModelConfigTest, LoadReadsConfigJsonFromDirectory) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "strata_model_config_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "config.json");
    out << kKimiLinearConfig;
  }
  absl::StatusOr<ModelConfig> config = LoadModelConfig(dir.string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, 96);
  EXPECT_EQ(config->source, (dir / "config.json").string());
  std::filesystem::remove_all(dir);

  absl::StatusOr<ModelConfig> missing = LoadModelConfig(dir.string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir.string()));
}

}  // namespace
}  // namespace strata::engine
