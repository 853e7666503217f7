// The MoE block (docs/model.md §6) in its steps, so that expert parallelism can cut it between
// them:
//
//   route (local) → z = latent_down(x) (LatentMoE) → routed = Σ_j w_j · Expert_{id_j}(z)
//   → latent_norm, latent_up → + shared experts (local)
//
// The middle step is where tokens meet experts. On one rank it is MoeRunExperts over all rows;
// with experts spread over ranks a MoeExpertExchange (dist/) sends each row to the ranks that
// own its experts, runs MoeRunExperts there on what arrived, and brings the weighted sums back.
#pragma once

#include <cstdint>

#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/tensor_parallel.h"
#include "engine/workspace.h"

namespace strata::engine {

// Router: ids/weights [num_rows, top_k] (ids in [0, num_experts); weights already renormalised
// and scaled by routed_scaling_factor). The score bias only selects (docs/model.md §6.1).
void MoeRoute(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t num_rows,
              int32_t* ids, float* weights, Workspace& ws);

// routed[num_rows, width] = Σ_j weights[r, j] · Expert_{ids[r, j]}(z[r]) over the entries with
// ids[r, j] ≥ 0 (negative ids are skipped: experts another rank runs); rows with no valid id
// become zeros. width = routed_expert_hidden_size (LatentMoE) or hidden_size. Each expert's
// weights are read once for all its rows. `expert_tokens` [num_experts] (may be null) is
// incremented by the rows each expert ran on.
void MoeRunExperts(const ModelConfig& cfg, const MoeWeights& w, const float* z, int64_t num_rows,
                   const int32_t* ids, const float* weights, float* routed, int64_t* expert_tokens,
                   Workspace& ws);

// Expert parallelism seam (implemented in dist/). Every rank calls Exchange once per MoE layer
// per step, in the same order, with num_rows ≥ 0 (a rank without work passes 0 rows and still
// takes part). On return `routed` [num_rows, width] holds what MoeRunExperts would have produced
// on one rank holding all experts (summation order may differ).
class MoeExpertExchange {
 public:
  virtual ~MoeExpertExchange() = default;
  virtual void Exchange(const ModelConfig& cfg, const MoeWeights& w, int moe_layer, const float* z,
                        int64_t num_rows, const int32_t* ids, const float* weights, float* routed,
                        int64_t* expert_tokens, Workspace& ws) = 0;
};

// Tensor parallelism inside the block (engine/tensor_parallel.h): every rank of the group has
// the same rows; `w` is the rank's shard. Without an exchange each rank runs its own routed
// experts on every row; with one (data parallelism over tensor-parallel groups: the experts
// spread over the ranks of every group) rank r of the group sends only its share of the rows
// (RangeOf(num_rows, r)) through the exchange.
struct MoeTensorParallel {
  TensorParallelGroup* group = nullptr;
  // [num_experts]: true for those this rank runs (read only without an exchange).
  const std::vector<bool>* experts = nullptr;
};

// The whole block: out[num_rows, d] (overwritten). `exchange` null: all experts are local.
// `moe_layer`: this layer's ordinal among MoE layers. With `tp`, out is this rank's partial sum
// (the caller all-reduces it over the group; LatentMoE reduces the experts' latent rows inside,
// before latent_norm). With an exchange every rank of the exchange's communicator calls it, in
// every MoE layer of every step (num_rows 0 included).
void MoeForward(const ModelConfig& cfg, const MoeWeights& w, int moe_layer, const float* x,
                int64_t num_rows, float* out, int64_t* expert_tokens, MoeExpertExchange* exchange,
                Workspace& ws, const MoeTensorParallel* tp = nullptr);

}  // namespace strata::engine
