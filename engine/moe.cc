#include "engine/moe.h"

#include <algorithm>
#include <cstring>

#include "engine/glu_ffn.h"
#include "engine/mixers.h"
#include "kernels/reference/rms_norm.h"
#include "kernels/reference/router.h"

namespace strata::engine {

void MoeRoute(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t num_rows,
              int32_t* ids, float* weights, Workspace& ws) {
  const MoeConfig& m = cfg.moe;
  WorkspaceScope scope(ws);
  // f32 scores on the full-width x.
  float* logits = ws.Floats(num_rows * m.num_experts);
  LinearForward(w.router, x, num_rows, logits);
  const kernels::RouterParams params{m.num_experts,      m.num_experts_per_token,
                                     m.num_expert_group, m.topk_group,
                                     m.renormalize,      m.routed_scaling_factor};
  kernels::RouteReference(logits, num_rows, w.score_bias.data(), params, ids, weights);
}

void MoeRunExperts(const ModelConfig& cfg, const MoeWeights& w, const float* z, int64_t num_rows,
                   const int32_t* ids, const float* weights, float* routed, int64_t* expert_tokens,
                   Workspace& ws) {
  const MoeConfig& m = cfg.moe;
  const int64_t top_k = m.num_experts_per_token, num_experts = m.num_experts;
  const int64_t width = m.is_latent() ? m.routed_expert_hidden_size : cfg.hidden_size;
  std::fill_n(routed, num_rows * width, 0.0f);
  if (num_rows == 0) return;
  WorkspaceScope scope(ws);

  // Counting sort of the (row, slot) pairs by expert: each expert's rows become one block.
  int64_t* start = ws.Array<int64_t>(num_experts + 1);
  std::fill_n(start, num_experts + 1, 0);
  for (int64_t i = 0; i < num_rows * top_k; ++i) {
    if (ids[i] >= 0) ++start[ids[i] + 1];
  }
  for (int64_t e = 0; e < num_experts; ++e) start[e + 1] += start[e];
  const int64_t num_pairs = start[num_experts];
  int64_t* fill = ws.Array<int64_t>(num_experts);
  std::copy_n(start, num_experts, fill);
  int64_t* pair_row = ws.Array<int64_t>(num_pairs);
  float* pair_weight = ws.Floats(num_pairs);
  for (int64_t i = 0; i < num_rows * top_k; ++i) {
    if (ids[i] < 0) continue;
    CHECK_LT(ids[i], num_experts);
    const int64_t slot = fill[ids[i]]++;
    pair_row[slot] = i / top_k;
    pair_weight[slot] = weights[i];
  }

  const kernels::GluParams act = GluFromConfig(cfg);
  float* gathered = ws.Floats(num_pairs * width);
  float* expert_out = ws.Floats(num_pairs * width);
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t first = start[e], count = start[e + 1] - first;
    if (expert_tokens != nullptr) expert_tokens[e] += count;
    if (count == 0) continue;
    for (int64_t i = 0; i < count; ++i) {
      std::memcpy(gathered + i * width, z + pair_row[first + i] * width, width * sizeof(float));
    }
    const ExpertWeights& ew = w.experts[static_cast<size_t>(e)];
    GluFfn(act, ew.w1, ew.w3, ew.w2, gathered, count, expert_out, ws);
    for (int64_t i = 0; i < count; ++i) {
      float* dst = routed + pair_row[first + i] * width;
      const float* src = expert_out + i * width;
      const float wgt = pair_weight[first + i];
      for (int64_t c = 0; c < width; ++c) dst[c] += wgt * src[c];
    }
  }
}

void MoeForward(const ModelConfig& cfg, const MoeWeights& w, int moe_layer, const float* x,
                int64_t num_rows, float* out, int64_t* expert_tokens, MoeExpertExchange* exchange,
                Workspace& ws) {
  const MoeConfig& m = cfg.moe;
  const int64_t d = cfg.hidden_size, top_k = m.num_experts_per_token;
  const int64_t width = m.is_latent() ? m.routed_expert_hidden_size : d;
  WorkspaceScope scope(ws);

  int32_t* ids = ws.Array<int32_t>(num_rows * top_k);
  float* weights = ws.Floats(num_rows * top_k);
  MoeRoute(cfg, w, x, num_rows, ids, weights, ws);

  // Routed experts see z = W_down x (LatentMoE) or x itself.
  const float* z = x;
  if (m.is_latent()) {
    float* latent = ws.Floats(num_rows * width);
    LinearForward(w.latent_down, x, num_rows, latent);
    z = latent;
  }
  float* routed = m.is_latent() ? ws.Floats(num_rows * width) : out;
  if (exchange != nullptr) {
    exchange->Exchange(cfg, w, moe_layer, z, num_rows, ids, weights, routed, expert_tokens, ws);
  } else {
    MoeRunExperts(cfg, w, z, num_rows, ids, weights, routed, expert_tokens, ws);
  }

  if (m.is_latent()) {
    if (!w.latent_norm.empty()) {
      kernels::RmsNormReference(routed, num_rows, width, w.latent_norm.data(), cfg.rms_norm_eps,
                                routed);
    }
    LinearForward(w.latent_up, routed, num_rows, out);
  }
  if (w.has_shared()) {
    float* shared = ws.Floats(num_rows * d);
    MlpForward(cfg, w.shared, x, num_rows, shared, ws);
    for (int64_t i = 0; i < num_rows * d; ++i) out[i] += shared[i];
  }
}

}  // namespace strata::engine
