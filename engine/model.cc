#include "engine/model.h"

#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "core/status.h"
#include "engine/mixers.h"
#include "kernels/reference/attn_res.h"
#include "kernels/reference/rms_norm.h"

namespace strata::engine {
namespace {

// Block AttnRes sources of the current forward (MODEL.md §1, §5): completed blocks plus the
// running partial sum p. All are [num_rows, d].
class AttnResSources {
 public:
  AttnResSources(int64_t num_rows, int64_t dim) : rows_(num_rows), dim_(dim) {}

  // h = Mix(blocks + [p], site)
  void Mix(const AttnResWeights& site, float eps, float* h) const {
    std::vector<const float*> sources;
    for (const std::vector<float>& b : blocks_) sources.push_back(b.data());
    sources.push_back(partial_.data());
    kernels::AttnResMixReference(sources.data(), static_cast<int>(sources.size()), rows_, dim_,
                                 site.norm.data(), site.proj.data(), eps, h);
  }
  // blocks.append(p); p = None (the next Add starts a new partial sum)
  void PushBlock() {
    blocks_.push_back(std::move(partial_));
    partial_.clear();
  }
  // p = a if p is None else p + a
  void Add(const float* a) {
    if (partial_.empty()) {
      partial_.assign(a, a + rows_ * dim_);
      return;
    }
    for (size_t i = 0; i < partial_.size(); ++i) partial_[i] += a[i];
  }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }

 private:
  int64_t rows_, dim_;
  std::vector<std::vector<float>> blocks_;
  std::vector<float> partial_;
};

// Adds a linear's bytes and parameters; `active` when every token uses it.
struct WeightCounter {
  WeightStats stats;
  void Add(const Linear& w, bool active = true) {
    if (w.empty()) return;
    stats.total_bytes += w.num_bytes();
    if (active) stats.active_params_per_token += w.out_features * w.in_features;
  }
  void Add(const std::vector<float>& v) { stats.total_bytes += static_cast<int64_t>(v.size()) * 4; }
};

WeightStats CountWeights(const ModelConfig& cfg, const ModelWeights& w) {
  WeightCounter c;
  c.stats.total_bytes += w.embed.num_bytes();  // read one row per token: not "active"
  if (!cfg.tie_word_embeddings)
    c.Add(w.lm_head);
  else
    c.stats.active_params_per_token += w.lm_head.out_features * w.lm_head.in_features;
  for (const LayerWeights& l : w.layers) {
    if (l.kda) {
      for (const Linear* x :
           {&l.kda->q_proj, &l.kda->k_proj, &l.kda->v_proj, &l.kda->f_a_proj, &l.kda->f_b_proj,
            &l.kda->b_proj, &l.kda->g_proj, &l.kda->g_a_proj, &l.kda->g_b_proj, &l.kda->o_proj}) {
        c.Add(*x);
      }
    }
    if (l.mla) {
      for (const Linear* x : {&l.mla->q_proj, &l.mla->q_a_proj, &l.mla->q_b_proj, &l.mla->kv_a_proj,
                              &l.mla->g_proj, &l.mla->o_proj}) {
        c.Add(*x);
      }
      c.Add(l.mla->kv_b_proj);
      c.stats.active_params_per_token += static_cast<int64_t>(l.mla->kv_b_proj.size());
    }
    if (l.dense) {
      c.Add(l.dense->gate_proj), c.Add(l.dense->up_proj), c.Add(l.dense->down_proj);
    }
    if (l.moe) {
      c.Add(l.moe->router), c.Add(l.moe->latent_down), c.Add(l.moe->latent_up);
      c.Add(l.moe->shared.gate_proj), c.Add(l.moe->shared.up_proj), c.Add(l.moe->shared.down_proj);
      int64_t expert_bytes = 0, expert_params = 0;
      for (const ExpertWeights& e : l.moe->experts) {
        for (const Linear* x : {&e.w1, &e.w3, &e.w2}) c.Add(*x, false);
      }
      if (!l.moe->experts.empty()) {
        const ExpertWeights& e = l.moe->experts[0];
        for (const Linear* x : {&e.w1, &e.w3, &e.w2}) {
          expert_bytes += x->num_bytes();
          expert_params += x->out_features * x->in_features;
        }
      }
      c.stats.routed_expert_bytes_per_layer_expert = expert_bytes;
      c.stats.active_params_per_token += expert_params * cfg.moe.num_experts_per_token;
    }
  }
  return c.stats;
}

}  // namespace

int64_t NumLogitRows(ForwardBatch batch) {
  int64_t rows = 0;
  for (const ForwardSequence& s : batch) {
    if (s.logits == LogitsMode::kLast) rows += s.num_new_tokens > 0 ? 1 : 0;
    if (s.logits == LogitsMode::kAll) rows += s.num_new_tokens;
  }
  return rows;
}

CacheGeometry GetCacheGeometry(const ModelConfig& cfg) {
  CacheGeometry g;
  g.num_kda_layers = cfg.NumKdaLayers();
  g.num_mla_layers = cfg.NumMlaLayers();
  const int64_t p = cfg.kda.projection_size();
  g.kda_state_floats = int64_t{cfg.kda.num_heads} * cfg.kda.head_dim * cfg.kda.head_dim;
  g.kda_conv_floats = 3 * int64_t{std::max(cfg.kda.conv_kernel_size - 1, 0)} * p;
  g.latent_dim = cfg.mla.latent_dim();
  return g;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir) {
  std::unique_ptr<Model> model(new Model());
  ASSIGN_OR_RETURN(model->checkpoint_, Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(model->weights_, LoadModelWeights(*model->checkpoint_));
  const ModelConfig& cfg = model->config();
  model->geometry_ = GetCacheGeometry(cfg);
  model->weight_stats_ = CountWeights(cfg, model->weights_);
  int kda = 0, mla = 0, moe = 0;
  for (int l = 0; l < cfg.num_layers; ++l) {
    model->mixer_index_.push_back(cfg.IsKda(l) ? kda++ : mla++);
    model->moe_index_.push_back(model->weights_.layers[static_cast<size_t>(l)].moe ? moe++ : -1);
  }
  LOG_INFO("engine", "loaded {}: {} layers ({} KDA, {} MLA), hidden {}, vocab {}", dir,
           cfg.num_layers, kda, mla, cfg.hidden_size, cfg.vocab_size);
  return model;
}

void Model::Forward(ForwardBatch batch, std::vector<float>* logits,
                    std::vector<int64_t>* expert_tokens) const {
  ForwardContext context;
  context.expert_tokens = expert_tokens;
  Forward(batch, logits, context);
}

void Model::Forward(ForwardBatch batch, std::vector<float>* logits,
                    const ForwardContext& context) const {
  const ModelConfig& cfg = config();
  Workspace& ws = context.workspace != nullptr ? *context.workspace : *workspace_;
  std::vector<int64_t>* expert_tokens = context.expert_tokens;
  const int64_t d = cfg.hidden_size;
  std::vector<RowSpan> rows;
  int64_t num_rows = 0;
  for (const ForwardSequence& s : batch) {
    rows.push_back({num_rows, s.num_new_tokens});
    num_rows += s.num_new_tokens;
  }
  const size_t n = static_cast<size_t>(num_rows);
  std::vector<float> h(n * d), normed(n * d), out(n * d);
  for (size_t s = 0; s < batch.size(); ++s) {
    for (int64_t i = 0; i < batch[s].num_new_tokens; ++i) {
      const int64_t id = batch[s].token_ids[i];
      CHECK(id >= 0 && id < cfg.vocab_size) << "token id " << id;
      EmbeddingRow(weights_.embed, id, h.data() + (rows[s].offset + i) * d);
    }
  }

  auto run_mixer = [&](int l, const float* in, float* result) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
    kernels::RmsNormReference(in, num_rows, d, lw.input_norm.data(), cfg.rms_norm_eps,
                              normed.data());
    const int index = mixer_index_[static_cast<size_t>(l)];
    if (lw.kda) {
      KdaMixerForward(cfg, *lw.kda, normed.data(), num_rows, batch, rows, index, result, ws);
    } else {
      MlaMixerForward(cfg, *lw.mla, normed.data(), num_rows, batch, rows, index, result, ws);
    }
  };
  auto run_ffn = [&](int l, const float* in, float* result) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
    kernels::RmsNormReference(in, num_rows, d, lw.post_norm.data(), cfg.rms_norm_eps,
                              normed.data());
    if (lw.moe) {
      if (expert_tokens != nullptr) expert_tokens->resize(cfg.moe.num_experts, 0);
      MoeForward(cfg, *lw.moe, moe_index_[static_cast<size_t>(l)], normed.data(), num_rows, result,
                 expert_tokens != nullptr ? expert_tokens->data() : nullptr, context.exchange, ws);
    } else {
      MlpForward(cfg, *lw.dense, normed.data(), num_rows, result, ws);
    }
  };

  if (cfg.has_attn_res()) {
    AttnResSources sources(num_rows, d);
    sources.Add(h.data());  // p = x0
    for (int l = 0; l < cfg.num_layers; ++l) {
      const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
      sources.Mix(lw.attn_res, cfg.rms_norm_eps, h.data());
      if (l % cfg.attn_res_block_size == 0) sources.PushBlock();
      run_mixer(l, h.data(), out.data());
      sources.Add(out.data());
      sources.Mix(lw.mlp_res, cfg.rms_norm_eps, h.data());
      run_ffn(l, h.data(), out.data());
      sources.Add(out.data());
    }
    sources.Mix(weights_.output_res, cfg.rms_norm_eps, h.data());
  } else {
    for (int l = 0; l < cfg.num_layers; ++l) {
      run_mixer(l, h.data(), out.data());
      for (size_t i = 0; i < h.size(); ++i) h[i] += out[i];
      run_ffn(l, h.data(), out.data());
      for (size_t i = 0; i < h.size(); ++i) h[i] += out[i];
    }
  }

  // Final norm and LM head only on the rows whose logits are wanted.
  std::vector<float> selected;
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t t = rows[s].count;
    if (t == 0 || batch[s].logits == LogitsMode::kNone) continue;
    const int64_t first = batch[s].logits == LogitsMode::kAll ? 0 : t - 1;
    const float* begin = h.data() + (rows[s].offset + first) * d;
    selected.insert(selected.end(), begin, begin + (t - first) * d);
  }
  const int64_t num_logit_rows = static_cast<int64_t>(selected.size()) / d;
  kernels::RmsNormReference(selected.data(), num_logit_rows, d, weights_.final_norm.data(),
                            cfg.rms_norm_eps, selected.data());
  logits->resize(static_cast<size_t>(num_logit_rows * cfg.vocab_size));
  if (num_logit_rows > 0) {
    LinearForward(weights_.lm_head, selected.data(), num_logit_rows, logits->data());
  }
}

SequenceCache::SequenceCache(const CacheGeometry& geometry, int64_t max_tokens, int block_size)
    : max_tokens_(max_tokens) {
  CHECK_GT(block_size, 0);
  const int64_t num_blocks = (max_tokens + block_size - 1) / block_size;
  for (int j = 0; j < geometry.num_kda_layers; ++j) {
    buffers_.emplace_back(static_cast<size_t>(geometry.kda_state_floats) * 4);
    view_.kda_state.push_back(buffers_.back().as<float>());
    buffers_.emplace_back(static_cast<size_t>(geometry.kda_conv_floats) * 4);
    view_.kda_conv.push_back(buffers_.back().as<float>());
  }
  for (int j = 0; j < geometry.num_mla_layers; ++j) {
    buffers_.emplace_back(static_cast<size_t>(num_blocks * block_size * geometry.latent_dim) * 4);
    view_.mla_pages.push_back(buffers_.back().as<float>());
  }
  for (int64_t b = 0; b < num_blocks; ++b) block_table_.push_back(static_cast<int32_t>(b));
  view_.block_table = block_table_.data();
  view_.block_size = block_size;
}

}  // namespace strata::engine
