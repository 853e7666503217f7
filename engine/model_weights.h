// Every weight of the language model, loaded by name from an official-layout checkpoint
// (docs/checkpoint.md §3–§6). Shapes are checked against the config at load; a mismatch is an
// error naming the tensor, its file, the expected and the found shape.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/checkpoint.h"
#include "engine/linear.h"
#include "engine/model_config.h"

namespace strata::engine {

struct KdaWeights {
  Linear q_proj, k_proj, v_proj;              // [P, d]
  std::vector<float> q_conv, k_conv, v_conv;  // [P, K] (index K-1 = current token)
  Linear f_a_proj;                            // [D, d]
  Linear f_b_proj;                            // [P, D]
  std::vector<float> a_log;                   // [H] (padding dropped)
  std::vector<float> dt_bias;                 // [P]
  Linear b_proj;                              // [H, d]
  Linear g_proj;                              // [P, d]   full-rank gate (K3), or empty
  Linear g_a_proj;                            // [D, d]   low-rank gate (Kimi-Linear), or empty
  Linear g_b_proj;                            // [P, D]
  std::vector<float> o_norm;                  // [D]
  Linear o_proj;                              // [d, P]
};

struct MlaWeights {
  Linear q_proj;                 // [H·(dn+dr), d] when q_lora_rank == 0
  Linear q_a_proj;               // [r_q, d]
  std::vector<float> q_a_norm;   // [r_q]
  Linear q_b_proj;               // [H·(dn+dr), r_q]
  Linear kv_a_proj;              // [r_kv + dr, d]
  std::vector<float> kv_a_norm;  // [r_kv]
  Linear kv_b_proj;              // [H·(dn+dv), r_kv] (read inside attention: f32 or bf16)
  Linear g_proj;                 // [H·dv, d] or empty
  Linear o_proj;                 // [d, H·dv]
};

struct MlpWeights {  // gate/up/down (dense MLP and fused shared experts)
  Linear gate_proj, up_proj, down_proj;
};

struct ExpertWeights {  // routed expert: w1 gate, w3 up, w2 down
  Linear w1, w3, w2;
};

struct MoeWeights {
  Linear router;                       // [E, d]
  std::vector<float> score_bias;       // [E] e_score_correction_bias
  Linear latent_down;                  // [L, d] or empty (no LatentMoE)
  std::vector<float> latent_norm;      // [L] or empty
  Linear latent_up;                    // [d, L] or empty
  std::vector<ExpertWeights> experts;  // [E]
  MlpWeights shared;                   // width S·I; empty when S == 0
  bool has_shared() const { return !shared.gate_proj.empty(); }
};

struct AttnResWeights {  // one AttnRes site: RMSNorm weight and projection, both [d]
  std::vector<float> norm, proj;
};

struct LayerWeights {
  std::vector<float> input_norm, post_norm;  // [d]
  AttnResWeights attn_res, mlp_res;          // empty without AttnRes
  std::unique_ptr<KdaWeights> kda;           // exactly one of kda / mla
  std::unique_ptr<MlaWeights> mla;
  std::unique_ptr<MlpWeights> dense;  // exactly one of dense / moe
  std::unique_ptr<MoeWeights> moe;
};

struct ModelWeights {
  Linear embed;                   // [V, d]
  std::vector<float> final_norm;  // [d]
  AttnResWeights output_res;      // empty without AttnRes
  Linear lm_head;                 // [V, d] (a copy of `embed`'s view when tied)
  std::vector<LayerWeights> layers;
  // Codes and scales of weights quantised at load (engine/weight_quantize.h: one buffer per
  // --quantization step); their Linears point into them.
  std::vector<AlignedBuffer> quantized;
  int64_t quantized_bytes() const;
  // Whether `data` lies in one of `quantized`.
  bool IsQuantizedAtLoad(const void* data) const;
};

absl::StatusOr<ModelWeights> LoadModelWeights(const Checkpoint& ckpt);

// What a Linear is to a decode step (weight statistics and memory placement differ by role).
enum class LinearRole {
  kEmbedding,     // one row read per token
  kLmHead,        // a view of the embedding when the config ties them
  kRoutedExpert,  // read when a token routes to it
  kDense,         // every other projection: read by every token
};

// Calls fn(linear, role) on every Linear of `w` (const or not), empty ones included: embed,
// lm_head, then layer by layer (mixer, dense MLP or MoE router, latent projections, shared
// experts, routed experts in id order).
template <typename Weights, typename Fn>
void ForEachLinear(Weights& w, Fn&& fn) {
  fn(w.embed, LinearRole::kEmbedding);
  fn(w.lm_head, LinearRole::kLmHead);
  for (auto& l : w.layers) {
    if (l.kda) {
      auto& k = *l.kda;
      for (auto* x : {&k.q_proj, &k.k_proj, &k.v_proj, &k.f_a_proj, &k.f_b_proj, &k.b_proj,
                      &k.g_proj, &k.g_a_proj, &k.g_b_proj, &k.o_proj}) {
        fn(*x, LinearRole::kDense);
      }
    }
    if (l.mla) {
      auto& m = *l.mla;
      for (auto* x : {&m.q_proj, &m.q_a_proj, &m.q_b_proj, &m.kv_a_proj, &m.kv_b_proj, &m.g_proj,
                      &m.o_proj}) {
        fn(*x, LinearRole::kDense);
      }
    }
    if (l.dense) {
      for (auto* x : {&l.dense->gate_proj, &l.dense->up_proj, &l.dense->down_proj}) {
        fn(*x, LinearRole::kDense);
      }
    }
    if (l.moe) {
      auto& m = *l.moe;
      for (auto* x : {&m.router, &m.latent_down, &m.latent_up, &m.shared.gate_proj,
                      &m.shared.up_proj, &m.shared.down_proj}) {
        fn(*x, LinearRole::kDense);
      }
      for (auto& e : m.experts) {
        for (auto* x : {&e.w1, &e.w3, &e.w2}) fn(*x, LinearRole::kRoutedExpert);
      }
    }
  }
}

// How weights are stored, for reports (/server_info, `strata bench`): "f32", "bf16", "mxfp4",
// "int8". RoutedExpertFormat: the routed experts this process runs (a quantised one decides:
// under expert parallelism only a process's share is), or "none" without MoE layers.
// ProjectionFormat: the first layer's mixer output projection, i.e. the format of the
// projections a token reads besides the experts.
const char* WeightFormatName(WeightFormat format);
std::string RoutedExpertFormat(const ModelWeights& w);
std::string ProjectionFormat(const ModelWeights& w);

// Copies row `id` of the embedding table into `out` [d] as f32.
void EmbeddingRow(const Linear& embed, int64_t id, float* out);

}  // namespace strata::engine
