// Kimi K3's vision path as configured by the checkpoint (docs/vision.md): MoonViT-V2
// (`vision_config` in config.json), the PatchMergerMLPV2 projector, and the image budget of
// preprocessor_config.json. Every size comes from the files; the defaults below are the
// released values, used only for keys a file leaves out.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::engine {

// RMSNorms of the vision tower pass no eps in the released code: PyTorch then uses float32's
// machine epsilon. One named constant so both the kernels and the reference agree.
inline constexpr float kVisionRmsNormEps = 1.1920928955078125e-07f;  // 2^-23

struct VisionConfig {
  int patch_size = 14;             // patch_size
  int hidden_size = 0;             // vt_hidden_size (D)
  int qkv_hidden_size = 0;         // qkv_hidden_size (q, k, v widths; heads × head_dim)
  int num_heads = 0;               // vt_num_attention_heads
  int intermediate_size = 0;       // vt_intermediate_size (MLP fc0 width)
  int num_layers = 0;              // vt_num_hidden_layers
  int pos_emb_height = 64;         // init_pos_emb_height (rows of patch_embed.pos_emb)
  int pos_emb_width = 64;          // init_pos_emb_width
  int merge_height = 2;            // merge_kernel_size[0]
  int merge_width = 2;             // merge_kernel_size[1]
  int mm_hidden_size = 0;          // mm_hidden_size (= hidden_size: the projector's input D)
  int text_hidden_size = 0;        // text_hidden_size (= the LM's hidden_size)
  float projector_ln_eps = 1e-5f;  // projector_ln_eps (mm_projector.post_norm)
  float rope_theta = 10000.0f;     // 2-D RoPE base (not a config key in the release)
  // preprocessor_config.json
  int64_t in_patch_limit = 65536;     // in_patch_limit: patches per image at most (before merge)
  int patch_limit_on_one_side = 512;  // patch_limit_on_one_side: patches along one side at most
  std::array<float, 3> image_mean = {0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std = {0.5f, 0.5f, 0.5f};

  int head_dim() const { return qkv_hidden_size / num_heads; }
  int merge_size() const { return merge_height * merge_width; }  // patches per merged row
  // Pixels along one side at most after the resize (7168 released).
  int max_side_pixels() const { return patch_limit_on_one_side * patch_size; }
};

// Parses K3's `vision_config` object (`source` names config.json in messages; keys are reported
// as `vision_config.<key>`) and, when `preprocessor_config` is not null, the image budget of
// preprocessor_config.json (`preprocessor_source` in messages; its keys are read at the top level
// or, failing that, under `media_proc_cfg`). Checks key presence and types and refuses what
// Strata's vision path does not implement: `norm_type` other than rmsnorm, any of `attn_bias`,
// `linear_bias`, `patch_embed_proj_bias` true, `pos_emb_interpolation_mode` other than bilinear,
// `merge_type` other than sd2_tpool, `mm_projector_type` other than patchmergerv2,
// `activation_func` other than gelu_pytorch_tanh, `projector_hidden_act` other than gelu (each
// key may be absent: the released value is assumed). Sizes are checked by ValidateVisionConfig.
absl::StatusOr<VisionConfig> ParseVisionConfig(
    const nlohmann::json& vision_config, const nlohmann::json* preprocessor_config,
    std::string_view source, std::string_view preprocessor_source = "preprocessor_config.json");

// Checks the sizes: every width positive, qkv_hidden_size divisible by the heads, head_dim
// divisible by 4 (the 2-D RoPE rotates groups of 4), a 2×2 merge kernel, mm_hidden_size ==
// vt_hidden_size, text_hidden_size == `text_hidden_size` (the language model's hidden_size),
// a positive image budget and image_std. Messages name the key (`vision_config.<key>`, or the
// preprocessor_config.json key) and the expectation; `source` names config.json.
absl::Status ValidateVisionConfig(const VisionConfig& config, int text_hidden_size,
                                  std::string_view source = "config.json");

}  // namespace strata::engine
