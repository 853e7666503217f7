// The typed model configuration of both checkpoint families (docs/checkpoint.md §2).
//
// Kimi K3 (`model_type: kimi_k3`) nests the language model under `text_config` and prefixes its
// tensors with `language_model.`; Kimi-Linear (`model_type: kimi_linear`) is flat. Both parse
// into one ModelConfig; every size comes from config.json, nothing is hard-coded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/vision/vision_config.h"

namespace strata::engine {

enum class ModelFamily { kKimiK3, kKimiLinear };
enum class MixerKind { kKda, kMla };
enum class FfnActivation { kSwiGlu, kSitu };

struct KdaConfig {
  int num_heads = 0;                  // linear_attn_config.num_heads
  int head_dim = 0;                   // linear_attn_config.head_dim (dk = dv)
  int conv_kernel_size = 4;           // linear_attn_config.short_conv_kernel_size
  bool has_gate_lower_bound = false;  // K3 gate when true
  float gate_lower_bound = 0.0f;      // linear_attn_config.gate_lower_bound (< 0)
  bool use_full_rank_gate = false;    // g_proj (true) or g_a_proj/g_b_proj (false)
  int projection_size() const { return num_heads * head_dim; }  // P
  // One sequence's caches of one KDA layer, f32 values: the state S [H, D, D] and the conv
  // cache [3, K − 1, P] (kernels/cpu/kda_layer.h).
  int64_t state_floats() const { return int64_t{num_heads} * head_dim * head_dim; }
  int64_t conv_floats() const {
    return 3 * int64_t{conv_kernel_size > 0 ? conv_kernel_size - 1 : 0} * projection_size();
  }
};

struct MlaConfig {
  int num_heads = 0;    // num_attention_heads
  int q_lora_rank = 0;  // 0 when null: a single q_proj
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  bool use_output_gate = false;  // mla_use_output_gate
  bool use_nope = true;          // mla_use_nope; false (RoPE) is rejected by Validate()
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // 576 in the releases
};

struct MoeConfig {
  int num_experts = 0;
  int num_experts_per_token = 0;
  int num_shared_experts = 0;
  int moe_intermediate_size = 0;
  bool renormalize = true;  // moe_renormalize
  float routed_scaling_factor = 1.0f;
  int num_expert_group = 1;
  int topk_group = 1;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  int routed_expert_hidden_size = 0;  // latent width L_d; 0 when absent (experts on full width)
  bool latent_use_norm = false;       // latent_moe_use_norm
  bool mxfp4_experts = false;         // routed experts stored as MXFP4 (quantization_config)
  bool is_latent() const { return routed_expert_hidden_size > 0; }
};

struct ModelConfig {
  static constexpr int kMaxLayers = 65536;  // sanity bound on num_hidden_layers

  ModelFamily family = ModelFamily::kKimiLinear;
  std::string tensor_prefix;  // "language_model." for K3, "" for Kimi-Linear
  int64_t vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  float rms_norm_eps = 1e-5f;
  bool tie_word_embeddings = false;
  std::vector<MixerKind> layer_mixer;  // [num_layers], from kda_layers / full_attn_layers (1-based)
  // The layer lists as written in config.json (1-based). They are the source of truth that
  // Validate() checks; layer_mixer is derived from them by ParseModelConfig.
  std::vector<int> kda_layers;        // linear_attn_config.kda_layers
  std::vector<int> full_attn_layers;  // linear_attn_config.full_attn_layers
  KdaConfig kda;
  MlaConfig mla;
  MoeConfig moe;
  int intermediate_size = 0;  // dense FFN width
  FfnActivation activation = FfnActivation::kSwiGlu;
  float situ_beta = 4.0f;         // activation_situ_beta (β1)
  float situ_linear_beta = 0.0f;  // activation_situ_linear_beta (β2); 0 when absent (no cap)
  int attn_res_block_size = 0;    // 0 when absent: plain pre-norm residual
  int64_t max_position_embeddings = 0;
  int64_t bos_token_id = -1;  // -1 when absent
  int64_t eos_token_id = -1;
  int64_t pad_token_id = -1;
  // The id whose single occurrence per image part is replaced by the image's rows (K3:
  // `<|media_pad|>`, 163605 released); top level or text_config. -1 when absent.
  int64_t media_placeholder_token_id = -1;
  // K3's vision tower and projector (`vision_config`, with preprocessor_config.json's image
  // budget); absent for Kimi-Linear and for a K3 config without `vision_config` (text only).
  std::optional<VisionConfig> vision;
  // Provenance for Validate() messages: the file, and the key path of the language-model keys
  // ("text_config." for K3, "" for Kimi-Linear).
  std::string source = "config.json";
  std::string key_prefix;

  bool IsKda(int layer) const { return layer_mixer[layer] == MixerKind::kKda; }
  bool IsMoe(int layer) const {
    return layer >= moe.first_k_dense_replace && layer % moe.moe_layer_freq == 0;
  }
  int NumKdaLayers() const;
  int NumMlaLayers() const;
  bool has_attn_res() const { return attn_res_block_size > 0; }

  // Checks internal consistency (layer lists partition 1..L, positive sizes, divisibility of
  // groups, MXFP4 widths multiple of 32, ...) and, with `vision`, ValidateVisionConfig against
  // hidden_size plus media_placeholder_token_id inside the vocabulary. The message names the key
  // and the expectation.
  // A config that passes has num_layers <= kMaxLayers and every product of sizes the engine
  // forms (P, H·(d_n+d_r), H·d_v, S·I, ...) representable in int.
  absl::Status Validate() const;
};

// Parses config.json text. `source` names the file in error messages. Checks key presence and
// types (and rejects unsupported values such as an unknown `hidden_act`); consistency checks
// are left to ModelConfig::Validate(). Absent optional keys (or null) take the defaults above.
// A K3 config's `vision_config` is parsed by ParseVisionConfig (engine/vision/vision_config.h);
// `preprocessor_text`, when not null, is preprocessor_config.json's text (named
// `preprocessor_source`), read only with a vision_config; without it the released image budget
// applies.
absl::StatusOr<ModelConfig> ParseModelConfig(
    std::string_view json_text, std::string_view source,
    const std::string* preprocessor_text = nullptr,
    std::string_view preprocessor_source = "preprocessor_config.json");
// Reads and parses <dir>/config.json, and <dir>/preprocessor_config.json when it exists.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);

}  // namespace strata::engine
