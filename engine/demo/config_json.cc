#include "engine/demo/config_json.h"

#include <nlohmann/json.hpp>

#include "engine/quantization_config.h"

namespace strata::engine::demo {
namespace {

using Json = nlohmann::ordered_json;

Json LinearAttnConfig(const ModelDims& d) {
  Json kda_layers = Json::array();
  for (int l = 1; l <= d.layers; ++l) {
    if (!d.IsMla(l - 1)) kda_layers.push_back(l);
  }
  Json la = Json::object();
  la["kda_layers"] = std::move(kda_layers);
  la["full_attn_layers"] = d.full_attn_layers;
  la["num_heads"] = d.kda_heads;
  la["head_dim"] = d.kda_head_dim;
  la["short_conv_kernel_size"] = d.conv_kernel;
  if (d.gate_lower_bound < 0.0) la["gate_lower_bound"] = d.gate_lower_bound;
  if (d.full_rank_gate) la["use_full_rank_gate"] = true;
  return la;
}

// Special token ids near the end of the vocabulary (they never influence the logits).
void AddSpecialTokens(const ModelDims& d, Json& config) {
  config["bos_token_id"] = d.vocab - 16;
  config["eos_token_id"] = d.vocab - 14;
  config["pad_token_id"] = d.vocab - 1;
}

// The language-model keys, in docs/checkpoint.md §2 order.
Json LanguageModelConfig(const ModelDims& d) {
  Json c = Json::object();
  c["model_type"] = "kimi_linear";
  c["vocab_size"] = d.vocab;
  c["hidden_size"] = d.hidden;
  c["num_hidden_layers"] = d.layers;
  c["rms_norm_eps"] = d.rms_norm_eps;
  c["tie_word_embeddings"] = d.tie_embeddings;
  c["linear_attn_config"] = LinearAttnConfig(d);
  c["num_attention_heads"] = d.mla_heads;
  c["num_key_value_heads"] = d.mla_heads;
  c["q_lora_rank"] = d.q_lora > 0 ? Json(d.q_lora) : Json(nullptr);
  c["kv_lora_rank"] = d.kv_lora;
  c["qk_nope_head_dim"] = d.qk_nope;
  c["qk_rope_head_dim"] = d.qk_rope;
  c["v_head_dim"] = d.v_head;
  c["mla_use_nope"] = true;
  if (d.mla_gate) c["mla_use_output_gate"] = true;
  c["intermediate_size"] = d.dense_intermediate;
  c["first_k_dense_replace"] = d.first_dense;
  c["moe_layer_freq"] = d.moe_layer_freq;
  c["num_experts"] = d.experts;
  c["num_experts_per_token"] = d.topk;
  c["num_shared_experts"] = d.shared_experts;
  c["moe_intermediate_size"] = d.expert_intermediate;
  c["moe_router_activation_func"] = "sigmoid";
  c["moe_renormalize"] = d.renormalize;
  c["routed_scaling_factor"] = d.routed_scaling;
  c["num_expert_group"] = d.groups;
  c["topk_group"] = d.topk_group;
  c["use_grouped_topk"] = true;
  c["topk_method"] = "noaux_tc";
  c["hidden_act"] = d.situ ? "situ" : "silu";
  if (d.situ) {
    c["activation_situ_beta"] = d.situ_beta;
    if (d.situ_linear_beta > 0.0) c["activation_situ_linear_beta"] = d.situ_linear_beta;
  }
  if (d.latent > 0) {
    c["routed_expert_hidden_size"] = d.latent;
    c["latent_moe_use_norm"] = true;
  }
  if (d.attn_res_block > 0) c["attn_res_block_size"] = d.attn_res_block;
  c["num_nextn_predict_layers"] = 0;
  c["max_position_embeddings"] = d.max_position;
  c["model_max_length"] = d.max_position;
  c["rope_theta"] = 50000.0;  // ignored: NoPE (mla_use_nope)
  c["torch_dtype"] = "bfloat16";
  AddSpecialTokens(d, c);
  return c;
}

// K3's `vision_config` with the released keys (docs/checkpoint.md, "Vision tower"); the
// switches Strata refuses other values of are written at their released values.
Json VisionConfigJson(const ModelDims& d) {
  Json v = Json::object();
  v["patch_size"] = d.vision_patch;
  v["vt_hidden_size"] = d.vision_hidden;
  v["qkv_hidden_size"] = d.vision_qkv;
  v["vt_num_attention_heads"] = d.vision_heads;
  v["vt_intermediate_size"] = d.vision_intermediate;
  v["vt_num_hidden_layers"] = d.vision_layers;
  v["activation_func"] = "gelu_pytorch_tanh";
  v["norm_type"] = "rmsnorm";
  v["attn_bias"] = false;
  v["linear_bias"] = false;
  v["patch_embed_proj_bias"] = false;
  v["init_pos_emb_height"] = d.vision_pos_emb;
  v["init_pos_emb_width"] = d.vision_pos_emb;
  v["pos_emb_interpolation_mode"] = "bilinear";
  v["merge_kernel_size"] = {2, 2};
  v["merge_type"] = "sd2_tpool";
  v["mm_projector_type"] = "patchmergerv2";
  v["projector_hidden_act"] = "gelu";
  v["mm_hidden_size"] = d.vision_hidden;
  v["text_hidden_size"] = d.hidden;
  v["projector_ln_eps"] = 1e-5;
  return v;
}

Json K3Config(const ModelDims& d) {
  Json text = LanguageModelConfig(d);
  if (d.mxfp4) text["quantization_config"] = engine::Mxfp4QuantizationConfig();
  Json c = Json::object();
  c["architectures"] = {"KimiK3ForConditionalGeneration"};
  c["auto_map"] = {{"AutoConfig", "configuration_kimi_k3.KimiK3Config"},
                   {"AutoModel", "modeling_kimi_k3.KimiK3ForConditionalGeneration"}};
  c["model_type"] = "kimi_k3";
  c["text_config"] = std::move(text);
  if (d.vision) c["vision_config"] = VisionConfigJson(d);
  c["media_placeholder_token_id"] = d.media_placeholder_id();
  AddSpecialTokens(d, c);
  c["tie_word_embeddings"] = d.tie_embeddings;
  if (d.mxfp4) c["quantization_config"] = engine::Mxfp4QuantizationConfig();
  c["torch_dtype"] = "bfloat16";
  c["transformers_version"] = "4.57.1";
  return c;
}

Json KimiLinearConfig(const ModelDims& d) {
  Json c = Json::object();
  c["architectures"] = {"KimiLinearForCausalLM"};
  c["auto_map"] = {{"AutoConfig", "configuration_kimi.KimiLinearConfig"},
                   {"AutoModelForCausalLM", "modeling_kimi.KimiLinearForCausalLM"}};
  // Unused leftover of the release (docs/checkpoint.md §1 rule 5: never read it).
  c["head_dim"] = d.hidden / d.mla_heads;
  c.update(LanguageModelConfig(d));
  c["transformers_version"] = "4.57.1";
  return c;
}

}  // namespace

std::string BuildConfigJson(const ModelDims& dims) {
  const Json config = dims.k3 ? K3Config(dims) : KimiLinearConfig(dims);
  return config.dump(2) + "\n";
}

std::string BuildPreprocessorConfigJson(const ModelDims& dims) {
  Json c = Json::object();
  c["in_patch_limit"] = dims.vision_in_patch_limit;
  c["patch_limit_on_one_side"] = 512;  // the release's (7168 pixels at patch 14)
  c["image_mean"] = {0.5, 0.5, 0.5};
  c["image_std"] = {0.5, 0.5, 0.5};
  c["patch_size"] = dims.vision_patch;
  c["merge_kernel_size"] = 2;
  return c.dump(2) + "\n";
}

}  // namespace strata::engine::demo
