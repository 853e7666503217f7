// The hyper-parameters of a generated checkpoint: presets and `--set key=value` overrides.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::engine::demo {

// Every size and switch of one model. Field names follow docs/checkpoint.md's symbols.
struct ModelDims {
  bool k3 = true;  // Kimi K3 (nested text_config, `language_model.` prefix) or Kimi-Linear (flat)
  int64_t vocab = 0;
  int hidden = 0;                     // d
  int layers = 0;                     // L
  std::vector<int> full_attn_layers;  // 1-based MLA layers; the others are KDA

  int kda_heads = 0;              // H_k
  int kda_head_dim = 0;           // D_k
  int conv_kernel = 4;            // K
  double gate_lower_bound = 0.0;  // < 0: K3 gate; 0: absent (Kimi-Linear gate)
  bool full_rank_gate = false;    // g_proj (true) or g_a_proj/g_b_proj

  int mla_heads = 0;  // H
  int q_lora = 0;     // r_q; 0 → null (single q_proj)
  int kv_lora = 0;    // r_kv
  int qk_nope = 0;    // d_n
  int qk_rope = 0;    // d_r
  int v_head = 0;     // d_v
  bool mla_gate = false;

  int dense_intermediate = 0;  // I_dense
  int first_dense = 1;         // first_k_dense_replace
  int moe_layer_freq = 1;
  int experts = 0;              // E
  int topk = 0;                 // k
  int shared_experts = 0;       // S
  int expert_intermediate = 0;  // I
  int latent = 0;               // L_d; 0 → no LatentMoE
  int groups = 1;               // num_expert_group
  int topk_group = 1;
  double routed_scaling = 1.0;
  bool renormalize = true;

  bool situ = true;  // hidden_act situ (true) or silu
  double situ_beta = 4.0;
  double situ_linear_beta = 25.0;  // 0 → key absent (no cap on the up branch)

  int attn_res_block = 0;  // attn_res_block_size; 0 → absent
  double rms_norm_eps = 1e-5;
  bool tie_embeddings = false;
  int64_t max_position = 1048576;
  bool mxfp4 = false;  // routed experts as MXFP4 (K3 only)

  // K3's vision tower (MoonViT-V2) and projector (PatchMergerMLPV2), written when `vision`:
  // `vision_config` keys in parentheses, preprocessor_config.json's budget last.
  bool vision = false;
  int vision_hidden = 0;          // D (vt_hidden_size = mm_hidden_size)
  int vision_qkv = 0;             // qkv_hidden_size (heads × head_dim)
  int vision_heads = 0;           // vt_num_attention_heads
  int vision_intermediate = 0;    // vt_intermediate_size
  int vision_layers = 0;          // vt_num_hidden_layers
  int vision_pos_emb = 0;         // init_pos_emb_height = init_pos_emb_width
  int vision_patch = 14;          // patch_size
  int vision_in_patch_limit = 0;  // in_patch_limit: patches per image at most

  // media_placeholder_token_id: the demo tokenizer's `<|media_pad|>` (its K3 control block
  // fills the top 256 ids, as in the release); vocab − 13 for vocabularies under 256 ids.
  int64_t media_placeholder_id() const;

  bool IsMla(int layer) const;  // 0-based
  bool IsMoe(int layer) const { return layer >= first_dense && layer % moe_layer_freq == 0; }
  int expert_input() const { return latent > 0 ? latent : hidden; }  // routed experts' width
  std::string prefix() const { return k3 ? "language_model." : ""; }
};

// The preset `preset` ("tiny" | "demo" | "bench") of `family` ("k3" | "kimi-linear"; empty →
// the preset's own family: demo K3, bench Kimi-Linear, tiny K3), with `overrides` applied and
// the result validated. Errors name the bad key or value and list the valid ones. `vision` adds
// the vision tower (K3 only: InvalidArgument for Kimi-Linear); the K3 demo preset always has it.
// `vision_*` overrides need the tower.
absl::StatusOr<ModelDims> ResolveDims(const std::string& family, const std::string& preset,
                                      const std::map<std::string, std::string>& overrides,
                                      bool mxfp4_experts, bool vision = false);

// The override keys accepted by ResolveDims, for help texts.
std::vector<std::string> OverrideKeys();

// MLA layers (1-based) for `layers` layers: every 4th layer and the last one.
std::vector<int> DefaultFullAttnLayers(int layers);

}  // namespace strata::engine::demo
