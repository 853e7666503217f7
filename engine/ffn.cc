#include <vector>

#include "engine/mixers.h"
#include "kernels/reference/glu.h"
#include "kernels/reference/rms_norm.h"
#include "kernels/reference/router.h"

namespace strata::engine {
namespace {

kernels::GluParams GluFromConfig(const ModelConfig& cfg) {
  kernels::GluParams params;
  params.kind =
      cfg.activation == FfnActivation::kSitu ? kernels::GluKind::kSitu : kernels::GluKind::kSwiGlu;
  params.beta1 = cfg.situ_beta;
  params.beta2 = cfg.situ_linear_beta;
  return params;
}

// out[rows, width_out] = down(act(gate(x)) ⊙ up'(x)) for gate/up/down linears.
void GluFfn(const kernels::GluParams& act, const Linear& gate, const Linear& up, const Linear& down,
            const float* x, int64_t num_rows, float* out) {
  const size_t hidden = static_cast<size_t>(num_rows * gate.out_features);
  std::vector<float> g(hidden), u(hidden);
  LinearForward(gate, x, num_rows, g.data());
  LinearForward(up, x, num_rows, u.data());
  kernels::GluReference(g.data(), u.data(), static_cast<int64_t>(hidden), act, g.data());
  LinearForward(down, g.data(), num_rows, out);
}

}  // namespace

void MlpForward(const ModelConfig& cfg, const MlpWeights& w, const float* x, int64_t num_rows,
                float* out) {
  GluFfn(GluFromConfig(cfg), w.gate_proj, w.up_proj, w.down_proj, x, num_rows, out);
}

void MoeForward(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t num_rows,
                float* out, int64_t* expert_tokens) {
  const MoeConfig& m = cfg.moe;
  const int64_t d = cfg.hidden_size, top_k = m.num_experts_per_token;
  const int64_t width = m.is_latent() ? m.routed_expert_hidden_size : d;
  const size_t n = static_cast<size_t>(num_rows);

  // Router on the full-width x, f32 scores; the bias only selects (MODEL.md §6.1).
  std::vector<float> logits(n * m.num_experts);
  LinearForward(w.router, x, num_rows, logits.data());
  std::vector<int32_t> ids(n * top_k);
  std::vector<float> weights(n * top_k);
  kernels::RouterParams params{m.num_experts, m.num_experts_per_token, m.num_expert_group,
                               m.topk_group,  m.renormalize,           m.routed_scaling_factor};
  kernels::RouteReference(logits.data(), num_rows, w.score_bias.data(), params, ids.data(),
                          weights.data());

  // Routed experts see z = W_down x (LatentMoE) or x itself.
  std::vector<float> latent;
  const float* z = x;
  if (m.is_latent()) {
    latent.resize(n * width);
    LinearForward(w.latent_down, x, num_rows, latent.data());
    z = latent.data();
  }

  // Group token rows by expert so each expert's weights are read once per step.
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(m.num_experts));
  std::vector<std::vector<float>> weight_of(static_cast<size_t>(m.num_experts));
  for (int64_t r = 0; r < num_rows; ++r) {
    for (int64_t j = 0; j < top_k; ++j) {
      const size_t e = static_cast<size_t>(ids[r * top_k + j]);
      rows_of[e].push_back(r);
      weight_of[e].push_back(weights[r * top_k + j]);
    }
  }
  const kernels::GluParams act = GluFromConfig(cfg);
  std::vector<float> routed_sum(n * width, 0.0f), gathered, expert_out;
  for (size_t e = 0; e < rows_of.size(); ++e) {
    const std::vector<int64_t>& rows = rows_of[e];
    if (expert_tokens != nullptr) expert_tokens[e] += static_cast<int64_t>(rows.size());
    if (rows.empty()) continue;
    const int64_t count = static_cast<int64_t>(rows.size());
    gathered.resize(rows.size() * width);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::copy_n(z + rows[i] * width, width, gathered.data() + i * width);
    }
    expert_out.resize(rows.size() * width);
    const ExpertWeights& ew = w.experts[e];
    GluFfn(act, ew.w1, ew.w3, ew.w2, gathered.data(), count, expert_out.data());
    for (size_t i = 0; i < rows.size(); ++i) {
      float* dst = routed_sum.data() + rows[i] * width;
      const float* src = expert_out.data() + i * width;
      const float wgt = weight_of[e][i];
      for (int64_t c = 0; c < width; ++c) dst[c] += wgt * src[c];
    }
  }

  if (m.is_latent()) {
    if (!w.latent_norm.empty()) {
      kernels::RmsNormReference(routed_sum.data(), num_rows, width, w.latent_norm.data(),
                                cfg.rms_norm_eps, routed_sum.data());
    }
    LinearForward(w.latent_up, routed_sum.data(), num_rows, out);
  } else {
    std::copy(routed_sum.begin(), routed_sum.end(), out);
  }
  if (w.has_shared()) {
    std::vector<float> shared(n * d);
    MlpForward(cfg, w.shared, x, num_rows, shared.data());
    for (size_t i = 0; i < shared.size(); ++i) out[i] += shared[i];
  }
}

}  // namespace strata::engine
