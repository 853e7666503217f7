#include "engine/demo/tensor_layout.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata::engine::demo {
namespace {

// ---- initialisation scales -------------------------------------------------------------------
// Random weights must give a model whose outputs can tell a bug from noise: activations O(1)
// through every layer, logits with a real spread, decays and gates that span their ranges, a
// router bias that changes some selections, non-uniform AttnRes weights. A linear layer [out, in]
// draws N(0, gain²/in): an input of unit RMS gives outputs of RMS ≈ gain.
constexpr double kProjectionGain = 1.0;  // q/k, gates, latent, router, MLA kv, KDA f_a
constexpr double kLogitGain = 2.0;       // lm_head on the unit-RMS final norm: logit std ≈ 2
constexpr double kMlaQueryGain = 1.5;    // q_b/q_proj: attention scores std ≈ 1.5 (non-uniform)
// Mixer outputs: RMSNorm(o)·σ(gate) has RMS ≈ 0.5 (KDA); attention averages values (RMS ≈ 0.5)
// and the optional MLA gate halves them again. These gains bring both mixers' outputs to RMS ≈ 1,
// like the FFNs', so that attention bugs move the logits as much as FFN bugs.
constexpr double kKdaOutGain = 2.0;
constexpr double kMlaOutGain = 2.0;
constexpr double kMlaGatedOutGain = 3.0;
// KDA values: o = Sᵀq is small (q has norm D_k^-1/2 and random q, k are nearly orthogonal), so
// with unit values the per-head RMS of o (~0.02) sits near sqrt(rms_norm_eps) and the eps of
// o_norm would dominate. Values of RMS ≈ 3 put o near 0.1, where the norm is a true norm.
constexpr double kKdaValueGain = 4.0;
constexpr double kFfnInGain = 2.0;       // gate/up pre-activations RMS ≈ 2: the SiTU caps bite
constexpr double kFfnOutGain = 0.35;     // down projection: FFN output RMS ≈ 1
constexpr double kDecayInputGain = 0.5;  // f_b: the gate input f has RMS ≈ 0.5
constexpr double kAttnResGain = 1.5;     // AttnRes pseudo-query: source logits std ≈ 1.5
constexpr double kNormWeightStd = 0.1;   // every RMSNorm weight ~ N(1, 0.1²)
constexpr double kEmbeddingStd = 1.0;
// Router scores σ(N(0,1)) have std ≈ 0.2; a bias of std 0.1 changes the top-k set of 25–75 % of
// the tokens (measured on the tiny presets) without dominating the routing.
constexpr double kRouterBiasStd = 0.1;
// exp(A_log) ∈ [0.5, 2]: the per-head rates differ, so using the wrong head's entry shows.
constexpr double kALogLow = -0.7, kALogHigh = 0.7;
// dt_bias ranges putting exp(g) between ~0.01 and ~0.9999 for |f| ≤ 1 (both gate formulas):
//   K3:  g = −5·σ(exp(A)·(f+dt)), σ argument in [−13, 3]
//   K-L: g = −exp(A)·softplus(f+dt), softplus argument in [−8.5, 3]
constexpr double kK3DtBiasLow = -5.5, kK3DtBiasHigh = 0.5;
constexpr double kKlDtBiasLow = -7.5, kKlDtBiasHigh = 2.0;
// Vision tower: pixels in [−1, 1] have RMS ≈ 0.5 in a typical image, so a patch embedding of
// gain 2 gives rows of RMS ≈ 1; the position table adds RMS 0.5. Attention averages values (RMS
// well under 1) and GELU halves its input's RMS: output gains of 2 bring both back to ≈ 1.
constexpr double kPatchEmbedGain = 2.0;
constexpr double kPosEmbStd = 0.5;
constexpr double kVisionAttnOutGain = 2.0;
constexpr double kVisionMlpOutGain = 2.0;

InitSpec Linear(int64_t fan_in, double gain = kProjectionGain) {
  return InitSpec::Normal(0.0, gain / std::sqrt(static_cast<double>(fan_in)));
}
InitSpec NormWeight() { return InitSpec::Normal(1.0, kNormWeightStd); }

class Builder {
 public:
  explicit Builder(std::string prefix) : prefix_(std::move(prefix)) {}

  void Add(const std::string& name, DType dtype, Shape shape, InitSpec init) {
    specs_.push_back({prefix_ + name, dtype, std::move(shape), init});
  }
  // A linear layer's weight [out, in] in bf16.
  void AddLinear(const std::string& name, int64_t out, int64_t in, double gain = kProjectionGain) {
    Add(name, DType::kBF16, {out, in}, Linear(in, gain));
  }
  void AddNorm(const std::string& name, int64_t width, DType dtype = DType::kBF16) {
    Add(name, dtype, {width}, NormWeight());
  }
  // A routed expert's weight: bf16 [out, in], or MXFP4 packed/scale pair.
  void AddExpertLinear(const std::string& module, int64_t out, int64_t in, double gain,
                       bool mxfp4) {
    if (!mxfp4) return AddLinear(module + ".weight", out, in, gain);
    specs_.push_back({prefix_ + module, DType::kU8, {out, in}, Linear(in, gain), true});
  }
  std::vector<TensorSpec> Take() { return std::move(specs_); }

 private:
  std::string prefix_;
  std::vector<TensorSpec> specs_;
};

void AddKda(const ModelDims& d, const std::string& p, Builder& b) {
  const int64_t proj = static_cast<int64_t>(d.kda_heads) * d.kda_head_dim;  // P
  const DType small = d.k3 ? DType::kF32 : DType::kBF16;  // conv and o_norm dtypes differ
  b.AddLinear(p + "q_proj.weight", proj, d.hidden);
  b.AddLinear(p + "k_proj.weight", proj, d.hidden);
  b.AddLinear(p + "v_proj.weight", proj, d.hidden, kKdaValueGain);
  for (const char* x : {"q", "k", "v"}) {
    // K taps of std K^-1/2: conv output RMS ≈ input RMS.
    b.Add(p + x + "_conv1d.weight", small, {proj, 1, d.conv_kernel},
          InitSpec::Normal(0.0, 1.0 / std::sqrt(static_cast<double>(d.conv_kernel))));
  }
  b.AddLinear(p + "f_a_proj.weight", d.kda_head_dim, d.hidden);
  b.AddLinear(p + "f_b_proj.weight", proj, d.kda_head_dim, kDecayInputGain);
  InitSpec a_log = InitSpec::Uniform(kALogLow, kALogHigh);
  if (d.k3) {
    a_log.num_random = d.kda_heads;  // [max(D_k, H_k)], zero beyond H_k
    b.Add(p + "A_log", DType::kF32, {std::max(d.kda_head_dim, d.kda_heads)}, a_log);
  } else {
    b.Add(p + "A_log", DType::kF32, {1, 1, d.kda_heads, 1}, a_log);
  }
  const bool k3_gate = d.gate_lower_bound < 0.0;
  b.Add(p + "dt_bias", DType::kF32, {proj},
        k3_gate ? InitSpec::Uniform(kK3DtBiasLow, kK3DtBiasHigh)
                : InitSpec::Uniform(kKlDtBiasLow, kKlDtBiasHigh));
  b.AddLinear(p + "b_proj.weight", d.kda_heads, d.hidden);
  if (d.full_rank_gate) {
    b.AddLinear(p + "g_proj.weight", proj, d.hidden);
  } else {
    b.AddLinear(p + "g_a_proj.weight", d.kda_head_dim, d.hidden);
    b.AddLinear(p + "g_b_proj.weight", proj, d.kda_head_dim);
  }
  b.AddNorm(p + "o_norm.weight", d.kda_head_dim, small);
  b.AddLinear(p + "o_proj.weight", d.hidden, proj, kKdaOutGain);
}

void AddMla(const ModelDims& d, const std::string& p, Builder& b) {
  const int64_t q_width = static_cast<int64_t>(d.mla_heads) * (d.qk_nope + d.qk_rope);
  if (d.q_lora > 0) {
    b.AddLinear(p + "q_a_proj.weight", d.q_lora, d.hidden);
    b.AddNorm(p + "q_a_layernorm.weight", d.q_lora);
    b.AddLinear(p + "q_b_proj.weight", q_width, d.q_lora, kMlaQueryGain);
  } else {
    b.AddLinear(p + "q_proj.weight", q_width, d.hidden, kMlaQueryGain);
  }
  b.AddLinear(p + "kv_a_proj_with_mqa.weight", d.kv_lora + d.qk_rope, d.hidden);
  b.AddNorm(p + "kv_a_layernorm.weight", d.kv_lora);
  b.AddLinear(p + "kv_b_proj.weight", static_cast<int64_t>(d.mla_heads) * (d.qk_nope + d.v_head),
              d.kv_lora);
  const int64_t out_width = static_cast<int64_t>(d.mla_heads) * d.v_head;
  if (d.mla_gate) b.AddLinear(p + "g_proj.weight", out_width, d.hidden);
  b.AddLinear(p + "o_proj.weight", d.hidden, out_width,
              d.mla_gate ? kMlaGatedOutGain : kMlaOutGain);
}

// A gated MLP (dense layer or fused shared experts): gate/up [width, d], down [d, width].
void AddMlp(const ModelDims& d, const std::string& p, int64_t width, Builder& b) {
  b.AddLinear(p + "gate_proj.weight", width, d.hidden, kFfnInGain);
  b.AddLinear(p + "up_proj.weight", width, d.hidden, kFfnInGain);
  b.AddLinear(p + "down_proj.weight", d.hidden, width, kFfnOutGain);
}

void AddMoe(const ModelDims& d, const std::string& p, Builder& b) {
  b.AddLinear(p + "gate.weight", d.experts, d.hidden);
  b.Add(p + "gate.e_score_correction_bias", d.k3 ? DType::kF32 : DType::kBF16, {d.experts},
        InitSpec::Normal(0.0, kRouterBiasStd));
  if (d.latent > 0) {
    b.AddLinear(p + "routed_expert_down_proj.weight", d.latent, d.hidden);
    b.AddNorm(p + "routed_expert_norm.weight", d.latent);
    b.AddLinear(p + "routed_expert_up_proj.weight", d.hidden, d.latent);
  }
  if (d.shared_experts > 0) {
    AddMlp(d, p + "shared_experts.", static_cast<int64_t>(d.shared_experts) * d.expert_intermediate,
           b);
  }
  const int64_t in = d.expert_input();
  const int64_t width = d.expert_intermediate;
  // The routed sum is multiplied by routed_scaling_factor (2.446 in Kimi-Linear): divide it out
  // of w2 so the MoE output stays O(1) for any factor.
  const double down_gain = kFfnOutGain / d.routed_scaling;
  for (int e = 0; e < d.experts; ++e) {
    const std::string x = absl::StrCat(p, "experts.", e, ".");
    b.AddExpertLinear(x + "w1", width, in, kFfnInGain, d.mxfp4);
    b.AddExpertLinear(x + "w2", in, width, down_gain, d.mxfp4);
    b.AddExpertLinear(x + "w3", width, in, kFfnInGain, d.mxfp4);
  }
}

void AddAttnRes(const ModelDims& d, const std::string& site, Builder& b) {
  b.AddNorm(site + "_norm.weight", d.hidden);
  b.AddLinear(site + "_proj.weight", 1, d.hidden, kAttnResGain);
}

void AddLayer(const ModelDims& d, int l, Builder& b) {
  const std::string p = absl::StrCat("model.layers.", l, ".");
  b.AddNorm(p + "input_layernorm.weight", d.hidden);
  b.AddNorm(p + "post_attention_layernorm.weight", d.hidden);
  if (d.attn_res_block > 0) {
    AddAttnRes(d, p + "self_attention_res", b);
    AddAttnRes(d, p + "mlp_res", b);
  }
  if (d.IsMla(l)) {
    AddMla(d, p + "self_attn.", b);
  } else {
    AddKda(d, p + "self_attn.", b);
  }
  if (d.IsMoe(l)) {
    AddMoe(d, p + "block_sparse_moe.", b);
  } else {
    AddMlp(d, p + "mlp.", d.dense_intermediate, b);
  }
}

// K3's vision tower and projector (docs/checkpoint.md, "Vision tower"), all bf16 without
// biases, no `language_model.` prefix. Scales keep the tower's activations O(1): the patch
// embedding maps a typical normalised image (pixel RMS ≈ 0.5) to RMS ≈ 1 and the position
// table adds RMS 0.5, so both what a patch shows and where it sits move the rows; every block
// adds O(1) to the residual; the projector ends in an RMSNorm, so image rows reach the language
// model with RMS ≈ 1 like the token embeddings and change its output.
void AddVision(const ModelDims& d, Builder& b) {
  const int64_t width = d.vision_hidden;  // D
  const int64_t patch = d.vision_patch;
  b.Add("vision_tower.patch_embed.proj.weight", DType::kBF16, {width, 3, patch, patch},
        Linear(3 * patch * patch, kPatchEmbedGain));
  b.Add("vision_tower.patch_embed.pos_emb.weight", DType::kBF16,
        {d.vision_pos_emb, d.vision_pos_emb, width}, InitSpec::Normal(0.0, kPosEmbStd));
  for (int i = 0; i < d.vision_layers; ++i) {
    const std::string p = absl::StrCat("vision_tower.encoder.blocks.", i, ".");
    b.AddNorm(p + "norm0.weight", width);
    b.AddLinear(p + "wqkv.weight", 3 * int64_t{d.vision_qkv}, width);  // rows q; k; v
    b.AddLinear(p + "wo.weight", width, d.vision_qkv, kVisionAttnOutGain);
    b.AddNorm(p + "norm1.weight", width);
    b.AddLinear(p + "mlp.fc0.weight", d.vision_intermediate, width);
    b.AddLinear(p + "mlp.fc1.weight", width, d.vision_intermediate, kVisionMlpOutGain);
  }
  b.AddNorm("vision_tower.encoder.final_layernorm.weight", width);
  const int64_t merged = 4 * width;  // 2×2 patches per row
  b.AddLinear("mm_projector.proj.0.weight", merged, merged);
  b.AddLinear("mm_projector.proj.2.weight", d.hidden, merged, kVisionMlpOutGain);
  b.AddNorm("mm_projector.post_norm.weight", d.hidden);
}

}  // namespace

std::vector<TensorSpec> ListTensors(const ModelDims& d) {
  Builder b(d.prefix());
  // Tied embeddings double as the output projection: give them lm_head's scale.
  const double embedding_std =
      d.tie_embeddings ? kLogitGain / std::sqrt(static_cast<double>(d.hidden)) : kEmbeddingStd;
  b.Add("model.embed_tokens.weight", DType::kBF16, {d.vocab, d.hidden},
        InitSpec::Normal(0.0, embedding_std));
  for (int l = 0; l < d.layers; ++l) AddLayer(d, l, b);
  b.AddNorm("model.norm.weight", d.hidden);
  if (d.attn_res_block > 0) AddAttnRes(d, "model.output_attn_res", b);
  if (!d.tie_embeddings) b.AddLinear("lm_head.weight", d.vocab, d.hidden, kLogitGain);
  std::vector<TensorSpec> specs = b.Take();
  if (d.vision) {
    Builder vision("");
    AddVision(d, vision);
    for (TensorSpec& spec : vision.Take()) specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace strata::engine::demo
