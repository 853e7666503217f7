#include "engine/moe.h"

#include <algorithm>

#include "core/check.h"
#include "engine/glu_ffn.h"
#include "engine/mixers.h"
#include "kernels/cpu/matmul_glu.h"
#include "kernels/cpu/matmul_scatter_add.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/router.h"

namespace strata::engine {
namespace {

using kernels::cpu::GluGroup;
using kernels::cpu::ScatterAddGroup;

// The (row, slot) pairs of valid ids sorted by expert (a counting sort: stable, so each
// expert's rows keep their order): expert e's pairs are [start[e], start[e + 1]).
struct ExpertPairs {
  int64_t* start = nullptr;  // [num_experts + 1]
  int64_t* row = nullptr;    // [num_pairs] source row
  float* weight = nullptr;   // [num_pairs] routing weight
};

ExpertPairs SortByExpert(int64_t num_experts, int64_t top_k, const int32_t* ids,
                         const float* weights, int64_t num_rows, Workspace& ws) {
  ExpertPairs p;
  p.start = ws.Array<int64_t>(num_experts + 1);
  std::fill_n(p.start, num_experts + 1, 0);
  for (int64_t i = 0; i < num_rows * top_k; ++i) {
    if (ids[i] < 0) continue;
    CHECK_LT(ids[i], num_experts);
    ++p.start[ids[i] + 1];
  }
  for (int64_t e = 0; e < num_experts; ++e) p.start[e + 1] += p.start[e];
  const int64_t num_pairs = p.start[num_experts];
  int64_t* fill = ws.Array<int64_t>(num_experts);
  std::copy_n(p.start, num_experts, fill);
  p.row = ws.Array<int64_t>(num_pairs);
  p.weight = ws.Floats(num_pairs);
  for (int64_t i = 0; i < num_rows * top_k; ++i) {
    if (ids[i] < 0) continue;
    const int64_t slot = fill[ids[i]]++;
    p.row[slot] = i / top_k;
    p.weight[slot] = weights[i];
  }
  return p;
}

// The shared experts riding along with the routed ones (MoeForward, all experts local): their
// fused gate/up product joins the routed experts' parallel region; their down product too when
// it adds into the same output (`down_into_routed`: no LatentMoE), else the caller runs it.
struct SharedRider {
  const MlpWeights* w = nullptr;
  const float* x = nullptr;  // [num_rows, hidden_size]
  float* h = nullptr;        // [num_rows, shared width], filled here
  bool down_into_routed = false;
};

// MoeRunExperts, optionally with the shared experts (see SharedRider). Two parallel regions in
// all: every expert's fused GLU over its rows, then every expert's down product added, weighted,
// into its rows of `routed` (tasks = column blocks over all experts, experts in ascending order,
// so results do not depend on the thread count).
void RunExperts(const ModelConfig& cfg, const MoeWeights& w, const float* z, int64_t num_rows,
                const int32_t* ids, const float* weights, float* routed, int64_t* expert_tokens,
                const SharedRider* shared, Workspace& ws) {
  const MoeConfig& m = cfg.moe;
  const int64_t num_experts = m.num_experts;
  const int64_t width = m.is_latent() ? m.routed_expert_hidden_size : cfg.hidden_size;
  std::fill_n(routed, num_rows * width, 0.0f);
  if (num_rows == 0) return;
  WorkspaceScope scope(ws);
  const ExpertPairs pairs =
      SortByExpert(num_experts, m.num_experts_per_token, ids, weights, num_rows, ws);
  const int64_t num_pairs = pairs.start[num_experts];
  const int64_t inter = m.moe_intermediate_size;
  float* h = ws.Floats(num_pairs * inter);

  GluGroup* glu = ws.Array<GluGroup>(num_experts + 1);
  ScatterAddGroup* down = ws.Array<ScatterAddGroup>(num_experts + 1);
  int64_t num_groups = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t first = pairs.start[e], count = pairs.start[e + 1] - first;
    if (expert_tokens != nullptr) expert_tokens[e] += count;
    if (count == 0) continue;
    const ExpertWeights& ew = w.experts[static_cast<size_t>(e)];
    CHECK_EQ(ew.w1.out_features, inter);
    glu[num_groups] = {KernelWeights(ew.w1), KernelWeights(ew.w3), z, pairs.row + first, count,
                       h + first * inter};
    down[num_groups] = {KernelWeights(ew.w2), h + first * inter, count, pairs.row + first,
                        pairs.weight + first};
    ++num_groups;
  }
  int64_t num_glu = num_groups, num_down = num_groups;
  if (shared != nullptr) {
    const MlpWeights& sw = *shared->w;
    glu[num_glu++] = {KernelWeights(sw.gate_proj),
                      KernelWeights(sw.up_proj),
                      shared->x,
                      nullptr,
                      num_rows,
                      shared->h};
    if (shared->down_into_routed) {
      down[num_down++] = {KernelWeights(sw.down_proj), shared->h, num_rows, nullptr, nullptr};
    }
  }
  const kernels::GluParams act = GluFromConfig(cfg);
  kernels::cpu::MatmulGluGrouped(glu, num_glu, act);
  kernels::cpu::MatmulScatterAddGrouped(down, num_down, width, routed);
}

// out += x_h · W_downᵀ (the shared experts' down product added into the block's output).
void AddSharedDown(const MlpWeights& shared, const float* h, int64_t num_rows, int64_t d,
                   float* out) {
  const ScatterAddGroup group{KernelWeights(shared.down_proj), h, num_rows, nullptr, nullptr};
  kernels::cpu::MatmulScatterAddGrouped(&group, 1, d, out);
}

}  // namespace

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
  kernels::cpu::Route(logits, num_rows, w.score_bias.data(), params, ids, weights);
}

void MoeRunExperts(const ModelConfig& cfg, const MoeWeights& w, const float* z, int64_t num_rows,
                   const int32_t* ids, const float* weights, float* routed, int64_t* expert_tokens,
                   Workspace& ws) {
  RunExperts(cfg, w, z, num_rows, ids, weights, routed, expert_tokens, nullptr, ws);
}

void MoeForward(const ModelConfig& cfg, const MoeWeights& w, int moe_layer, const float* x,
                int64_t num_rows, float* out, int64_t* expert_tokens, MoeExpertExchange* exchange,
                Workspace& ws, const MoeTensorParallel* tp) {
  const MoeConfig& m = cfg.moe;
  const int64_t d = cfg.hidden_size, top_k = m.num_experts_per_token;
  const int64_t width = m.is_latent() ? m.routed_expert_hidden_size : d;
  WorkspaceScope scope(ws);

  int32_t* ids = ws.Array<int32_t>(num_rows * top_k);
  float* weights = ws.Floats(num_rows * top_k);
  MoeRoute(cfg, w, x, num_rows, ids, weights, ws);
  if (tp != nullptr && exchange == nullptr) {  // another rank of the group runs the others
    for (int64_t i = 0; i < num_rows * top_k; ++i) {
      if (!(*tp->experts)[static_cast<size_t>(ids[i])]) ids[i] = -1;
    }
  }

  // Routed experts see z = W_down x (LatentMoE) or x itself.
  const float* z = x;
  if (m.is_latent()) {
    float* latent = ws.Floats(num_rows * width);
    LinearForward(w.latent_down, x, num_rows, latent);
    z = latent;
  }
  float* routed = m.is_latent() ? ws.Floats(num_rows * width) : out;
  // Shared experts: out = routed part + Shared(x), Shared's terms added last.
  SharedRider shared;
  if (w.has_shared()) {
    shared.w = &w.shared;
    shared.x = x;
    shared.h = ws.Floats(num_rows * w.shared.gate_proj.out_features);
    shared.down_into_routed = !m.is_latent();
  }
  bool shared_down_done = false;
  if (exchange != nullptr) {
    // Data parallelism over tensor-parallel groups: every rank of a group holds the same rows
    // and the experts live on the ranks of every group, so each rank sends its share of the rows
    // and leaves zeros in the others: the group's sum (the latent all-reduce below, or the one
    // after the block) then holds every row's experts once.
    ShardRange share{0, num_rows};
    if (tp != nullptr) {
      share = RangeOf(num_rows, {tp->group->rank(), tp->group->size()});
      std::fill(routed, routed + num_rows * width, 0.0f);
    }
    exchange->Exchange(cfg, w, moe_layer, z + share.begin * width, share.size(),
                       ids + share.begin * top_k, weights + share.begin * top_k,
                       routed + share.begin * width, expert_tokens, ws);
    if (w.has_shared()) {
      kernels::cpu::MatmulGlu(KernelWeights(w.shared.gate_proj), KernelWeights(w.shared.up_proj),
                              GluFromConfig(cfg), x, num_rows, shared.h);
    }
  } else {
    RunExperts(cfg, w, z, num_rows, ids, weights, routed, expert_tokens,
               w.has_shared() ? &shared : nullptr, ws);
    shared_down_done = shared.down_into_routed;
  }

  if (m.is_latent()) {
    if (tp != nullptr && num_rows > 0) tp->group->AllReduceSum(routed, num_rows * width);
    if (!w.latent_norm.empty()) {
      kernels::cpu::RmsNorm(routed, num_rows, width, w.latent_norm.data(), cfg.rms_norm_eps,
                            routed);
    }
    if (tp == nullptr) {
      LinearForward(w.latent_up, routed, num_rows, out);
    } else {  // this rank's rows of latent_up: its share of the hidden columns, zeros elsewhere
      const ShardRange cols = RangeOf(d, {tp->group->rank(), tp->group->size()});
      float* part = ws.Floats(num_rows * cols.size());
      if (cols.size() > 0) LinearForward(w.latent_up, routed, num_rows, part);
      std::fill(out, out + num_rows * d, 0.0f);
      for (int64_t r = 0; r < num_rows; ++r) {
        std::copy(part + r * cols.size(), part + (r + 1) * cols.size(), out + r * d + cols.begin);
      }
    }
  }
  if (w.has_shared() && !shared_down_done) AddSharedDown(w.shared, shared.h, num_rows, d, out);
}

}  // namespace strata::engine
