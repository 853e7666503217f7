#include "engine/model_weights.h"

#include <string>

#include "core/status.h"

namespace strata::engine {
namespace {

using std::to_string;

// Loads a model-level or layer-level tensor; every name gets the family's prefix.
class Loader {
 public:
  Loader(const Checkpoint& ckpt) : ckpt_(ckpt), cfg_(ckpt.config()) {}

  absl::StatusOr<Linear> Lin(const std::string& name, int64_t out, int64_t in) const {
    return LoadLinear(ckpt_, cfg_.tensor_prefix + name, out, in);
  }
  absl::StatusOr<std::vector<float>> Vec(const std::string& name, const Shape& shape) const {
    return LoadVector(ckpt_, cfg_.tensor_prefix + name, shape);
  }
  bool Has(const std::string& name) const { return ckpt_.Has(cfg_.tensor_prefix + name); }
  const Checkpoint& ckpt() const { return ckpt_; }
  const ModelConfig& cfg() const { return cfg_; }

  absl::StatusOr<AttnResWeights> AttnRes(const std::string& base) const {
    AttnResWeights w;
    const int64_t d = cfg_.hidden_size;
    ASSIGN_OR_RETURN(w.norm, Vec(base + "_norm.weight", {d}));
    ASSIGN_OR_RETURN(w.proj, Vec(base + "_proj.weight", {1, d}));
    return w;
  }

  absl::StatusOr<MlpWeights> Mlp(const std::string& base, int64_t width) const {
    MlpWeights w;
    const int64_t d = cfg_.hidden_size;
    ASSIGN_OR_RETURN(w.gate_proj, Lin(base + "gate_proj.weight", width, d));
    ASSIGN_OR_RETURN(w.up_proj, Lin(base + "up_proj.weight", width, d));
    ASSIGN_OR_RETURN(w.down_proj, Lin(base + "down_proj.weight", d, width));
    return w;
  }

  absl::StatusOr<std::unique_ptr<KdaWeights>> Kda(const std::string& base) const;
  absl::StatusOr<std::unique_ptr<MlaWeights>> Mla(const std::string& base) const;
  absl::StatusOr<std::unique_ptr<MoeWeights>> Moe(const std::string& base) const;

 private:
  // A_log: K3 stores [N ≥ H] (zero padded), Kimi-Linear [1, 1, H, 1]; keep the first H.
  absl::StatusOr<std::vector<float>> ALog(const std::string& name, int num_heads) const;

  const Checkpoint& ckpt_;
  const ModelConfig& cfg_;
};

absl::StatusOr<std::vector<float>> Loader::ALog(const std::string& name, int num_heads) const {
  const std::string full = cfg_.tensor_prefix + name;
  ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.Find(full));
  const int64_t n = NumElements(t->shape);
  bool layout_ok = n >= num_heads;
  // Either a vector [N] or a shape whose only non-1 dimension holds the heads.
  int non_unit = 0;
  for (int64_t dim : t->shape) non_unit += dim != 1;
  layout_ok = layout_ok && non_unit <= 1;
  if (!layout_ok || !IsFloat(t->dtype)) {
    return absl::InvalidArgumentError(
        "tensor '" + full + "' in " + t->file + ": expected " + "A_log with at least " +
        to_string(num_heads) + " values ([N] or [1,1,H,1]), found " + ShapeToString(t->shape));
  }
  std::vector<float> all(static_cast<size_t>(n));
  ConvertToF32(t->dtype, t->data, all.size(), all.data());
  all.resize(static_cast<size_t>(num_heads));
  return all;
}

absl::StatusOr<std::unique_ptr<KdaWeights>> Loader::Kda(const std::string& base) const {
  auto w = std::make_unique<KdaWeights>();
  const KdaConfig& k = cfg_.kda;
  const int64_t d = cfg_.hidden_size, p = k.projection_size(), hd = k.head_dim;
  const int64_t ks = k.conv_kernel_size;
  ASSIGN_OR_RETURN(w->q_proj, Lin(base + "q_proj.weight", p, d));
  ASSIGN_OR_RETURN(w->k_proj, Lin(base + "k_proj.weight", p, d));
  ASSIGN_OR_RETURN(w->v_proj, Lin(base + "v_proj.weight", p, d));
  ASSIGN_OR_RETURN(w->q_conv, Vec(base + "q_conv1d.weight", {p, 1, ks}));
  ASSIGN_OR_RETURN(w->k_conv, Vec(base + "k_conv1d.weight", {p, 1, ks}));
  ASSIGN_OR_RETURN(w->v_conv, Vec(base + "v_conv1d.weight", {p, 1, ks}));
  ASSIGN_OR_RETURN(w->f_a_proj, Lin(base + "f_a_proj.weight", hd, d));
  ASSIGN_OR_RETURN(w->f_b_proj, Lin(base + "f_b_proj.weight", p, hd));
  ASSIGN_OR_RETURN(w->a_log, ALog(base + "A_log", k.num_heads));
  ASSIGN_OR_RETURN(w->dt_bias, Vec(base + "dt_bias", {p}));
  ASSIGN_OR_RETURN(w->b_proj, Lin(base + "b_proj.weight", k.num_heads, d));
  if (k.use_full_rank_gate) {
    ASSIGN_OR_RETURN(w->g_proj, Lin(base + "g_proj.weight", p, d));
  } else {
    ASSIGN_OR_RETURN(w->g_a_proj, Lin(base + "g_a_proj.weight", hd, d));
    ASSIGN_OR_RETURN(w->g_b_proj, Lin(base + "g_b_proj.weight", p, hd));
  }
  ASSIGN_OR_RETURN(w->o_norm, Vec(base + "o_norm.weight", {hd}));
  ASSIGN_OR_RETURN(w->o_proj, Lin(base + "o_proj.weight", d, p));
  return w;
}

absl::StatusOr<std::unique_ptr<MlaWeights>> Loader::Mla(const std::string& base) const {
  auto w = std::make_unique<MlaWeights>();
  const MlaConfig& m = cfg_.mla;
  const int64_t d = cfg_.hidden_size, h = m.num_heads;
  if (m.q_lora_rank > 0) {
    ASSIGN_OR_RETURN(w->q_a_proj, Lin(base + "q_a_proj.weight", m.q_lora_rank, d));
    ASSIGN_OR_RETURN(w->q_a_norm, Vec(base + "q_a_layernorm.weight", {m.q_lora_rank}));
    ASSIGN_OR_RETURN(w->q_b_proj,
                     Lin(base + "q_b_proj.weight", h * m.qk_head_dim(), m.q_lora_rank));
  } else {
    ASSIGN_OR_RETURN(w->q_proj, Lin(base + "q_proj.weight", h * m.qk_head_dim(), d));
  }
  ASSIGN_OR_RETURN(w->kv_a_proj, Lin(base + "kv_a_proj_with_mqa.weight", m.latent_dim(), d));
  ASSIGN_OR_RETURN(w->kv_a_norm, Vec(base + "kv_a_layernorm.weight", {m.kv_lora_rank}));
  ASSIGN_OR_RETURN(w->kv_b_proj, Lin(base + "kv_b_proj.weight",
                                     h * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank));
  if (m.use_output_gate) {
    ASSIGN_OR_RETURN(w->g_proj, Lin(base + "g_proj.weight", h * m.v_head_dim, d));
  }
  ASSIGN_OR_RETURN(w->o_proj, Lin(base + "o_proj.weight", d, h * m.v_head_dim));
  return w;
}

absl::StatusOr<std::unique_ptr<MoeWeights>> Loader::Moe(const std::string& base) const {
  auto w = std::make_unique<MoeWeights>();
  const MoeConfig& m = cfg_.moe;
  const int64_t d = cfg_.hidden_size, e = m.num_experts, inter = m.moe_intermediate_size;
  const int64_t width = m.is_latent() ? m.routed_expert_hidden_size : d;
  ASSIGN_OR_RETURN(w->router, Lin(base + "gate.weight", e, d));
  ASSIGN_OR_RETURN(w->score_bias, Vec(base + "gate.e_score_correction_bias", {e}));
  if (m.is_latent()) {
    ASSIGN_OR_RETURN(w->latent_down, Lin(base + "routed_expert_down_proj.weight", width, d));
    if (m.latent_use_norm) {
      ASSIGN_OR_RETURN(w->latent_norm, Vec(base + "routed_expert_norm.weight", {width}));
    }
    ASSIGN_OR_RETURN(w->latent_up, Lin(base + "routed_expert_up_proj.weight", d, width));
  }
  w->experts.resize(static_cast<size_t>(e));
  for (int64_t i = 0; i < e; ++i) {
    const std::string expert = base + "experts." + to_string(i) + ".";
    ExpertWeights& x = w->experts[static_cast<size_t>(i)];
    if (m.mxfp4_experts || Has(expert + "w1.weight_packed")) {
      const Checkpoint& c = ckpt_;
      const std::string p = cfg_.tensor_prefix + expert;
      ASSIGN_OR_RETURN(x.w1, LoadLinearMxfp4(c, p + "w1", inter, width));
      ASSIGN_OR_RETURN(x.w3, LoadLinearMxfp4(c, p + "w3", inter, width));
      ASSIGN_OR_RETURN(x.w2, LoadLinearMxfp4(c, p + "w2", width, inter));
    } else {
      ASSIGN_OR_RETURN(x.w1, Lin(expert + "w1.weight", inter, width));
      ASSIGN_OR_RETURN(x.w3, Lin(expert + "w3.weight", inter, width));
      ASSIGN_OR_RETURN(x.w2, Lin(expert + "w2.weight", width, inter));
    }
  }
  if (m.num_shared_experts > 0) {
    ASSIGN_OR_RETURN(w->shared,
                     Mlp(base + "shared_experts.", int64_t{m.num_shared_experts} * inter));
  }
  return w;
}

}  // namespace

absl::StatusOr<ModelWeights> LoadModelWeights(const Checkpoint& ckpt) {
  const ModelConfig& cfg = ckpt.config();
  Loader load(ckpt);
  ModelWeights w;
  const int64_t d = cfg.hidden_size, v = cfg.vocab_size;
  ASSIGN_OR_RETURN(w.embed, load.Lin("model.embed_tokens.weight", v, d));
  ASSIGN_OR_RETURN(w.final_norm, load.Vec("model.norm.weight", {d}));
  if (cfg.tie_word_embeddings) {
    w.lm_head.format = w.embed.format;
    w.lm_head.out_features = v;
    w.lm_head.in_features = d;
    w.lm_head.data = w.embed.data;
  } else {
    ASSIGN_OR_RETURN(w.lm_head, load.Lin("lm_head.weight", v, d));
  }
  if (cfg.has_attn_res()) {
    ASSIGN_OR_RETURN(w.output_res, load.AttnRes("model.output_attn_res"));
  }
  w.layers.resize(static_cast<size_t>(cfg.num_layers));
  for (int l = 0; l < cfg.num_layers; ++l) {
    const std::string base = "model.layers." + to_string(l) + ".";
    LayerWeights& layer = w.layers[static_cast<size_t>(l)];
    ASSIGN_OR_RETURN(layer.input_norm, load.Vec(base + "input_layernorm.weight", {d}));
    ASSIGN_OR_RETURN(layer.post_norm, load.Vec(base + "post_attention_layernorm.weight", {d}));
    if (cfg.has_attn_res()) {
      ASSIGN_OR_RETURN(layer.attn_res, load.AttnRes(base + "self_attention_res"));
      ASSIGN_OR_RETURN(layer.mlp_res, load.AttnRes(base + "mlp_res"));
    }
    if (cfg.IsKda(l)) {
      ASSIGN_OR_RETURN(layer.kda, load.Kda(base + "self_attn."));
    } else {
      ASSIGN_OR_RETURN(layer.mla, load.Mla(base + "self_attn."));
    }
    if (cfg.IsMoe(l)) {
      ASSIGN_OR_RETURN(layer.moe, load.Moe(base + "block_sparse_moe."));
    } else {
      ASSIGN_OR_RETURN(auto dense, load.Mlp(base + "mlp.", cfg.intermediate_size));
      layer.dense = std::make_unique<MlpWeights>(std::move(dense));
    }
  }
  return w;
}

int64_t ModelWeights::quantized_bytes() const {
  int64_t bytes = 0;
  for (const AlignedBuffer& b : quantized) bytes += static_cast<int64_t>(b.size());
  return bytes;
}

bool ModelWeights::IsQuantizedAtLoad(const void* data) const {
  const auto* p = static_cast<const char*>(data);
  for (const AlignedBuffer& b : quantized) {
    const auto* begin = b.as<const char>();
    if (p != nullptr && p >= begin && p < begin + b.size()) return true;
  }
  return false;
}

const char* WeightFormatName(WeightFormat format) {
  return kernels::cpu::WeightFormatName(KernelFormat(format));
}

std::string RoutedExpertFormat(const ModelWeights& w) {
  for (const LayerWeights& l : w.layers) {
    if (!l.moe) continue;
    for (const ExpertWeights& e : l.moe->experts) {
      if (e.w1.format == WeightFormat::kMxfp4 || e.w1.format == WeightFormat::kInt8) {
        return WeightFormatName(e.w1.format);
      }
    }
    if (!l.moe->experts.empty()) return WeightFormatName(l.moe->experts[0].w1.format);
  }
  return "none";
}

std::string ProjectionFormat(const ModelWeights& w) {
  if (w.layers.empty()) return "none";
  const LayerWeights& l = w.layers[0];
  return WeightFormatName(l.kda ? l.kda->o_proj.format : l.mla->o_proj.format);
}

void EmbeddingRow(const Linear& embed, int64_t id, float* out) {
  CHECK(id >= 0 && id < embed.out_features) << "token id " << id;
  const int64_t d = embed.in_features;
  switch (embed.format) {
    case WeightFormat::kBf16:
      ConvertToF32(DType::kBF16, static_cast<const uint16_t*>(embed.data) + id * d,
                   static_cast<size_t>(d), out);
      return;
    case WeightFormat::kF32:
      ConvertToF32(DType::kF32, static_cast<const float*>(embed.data) + id * d,
                   static_cast<size_t>(d), out);
      return;
    case WeightFormat::kMxfp4:
    case WeightFormat::kInt8:
      CHECK(false) << "quantised embeddings are not a checkpoint format";
  }
}

}  // namespace strata::engine
