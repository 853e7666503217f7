// A capacity plan on paper (`strata plan`): from config.json alone, what one rank of a
// tensor-parallel (TP) × decode-context-parallel (DCP) × data-parallel (DP) deployment holds —
// weight bytes, cache left after a reserve, latent tokens and KDA states, how many long
// sequences fit — and the bytes each collective moves per token. No weights are read.
//
// Layout (as the engine shards, engine/tensor_parallel.h): a TP group of T ranks holds one copy
// of the model; D groups (data parallel) make a world of W = T·D ranks; the C ranks of a DCP
// group (C divides T) split each sequence's latent cache by token position.
//
// Weights of one rank (rank 0 of the group, which holds the largest shares), in their storage
// format: Linears bf16 (2 bytes) unless quantised; vectors f32 (4 bytes, engine/model_weights.h).
//   embedding, LM head   vocab-parallel, ceil(V/T) rows each [·, d]; tied: the embedding only
//   KDA mixer            q/k/v [P/T, d], b_proj [H/T, d], f_b [P/T, D], g_proj [P/T, d] or g_b
//                        [P/T, D], conv ×3 [P/T, K] f32, A_log [H/T] f32, dt_bias [P/T] f32 by
//                        head; f_a [D, d] and g_a [D, d] replicated; o_proj [d, P/T]
//   MLA mixer            q_proj [H/T·(dn+dr), d] or q_a_proj [r_q, d] (replicated) + q_b_proj
//                        [H/T·(dn+dr), r_q]; kv_a_proj [r_kv+dr, d] replicated; kv_b_proj
//                        [H/T·(dn+dv), r_kv]; g_proj [H/T·dv, d]; o_proj [d, H/T·dv]
//   dense MLP, shared    gate/up [ceil(I/T), d], down [d, ceil(I/T)] (shared: I = S·I_moe)
//   LatentMoE            latent_down [L, d] replicated; latent_up [ceil(d/T), L]
//   routed experts       expert parallel over all W ranks: ceil(E/W) on the first E mod W ranks
//                        (floor(E/W) on the rest); w1, w3 [I, X], w2 [X, I], X = L or d
//   norms and routers    every RMSNorm and AttnRes vector (f32), o_norm [D], q_a_norm [r_q],
//                        kv_a_norm [r_kv], latent_norm [L], score bias [E] (f32), router [E, d]
// Formats: MXFP4 = rows·cols/2 codes + rows·cols/32 E8M0 scales (routed experts: as stored in
// K3's release, or --quantization mxfp4); int8 = rows·cols codes + 2·rows·ceil(cols/32) bf16
// scales (--quantization int8: every Linear but the embedding, routers, kv_b_proj, MXFP4 experts
// and those whose full input width is not a multiple of 32 — engine/weight_quantize.h).
//
// Cache per rank: cache = device − weights − reserve, reserve = reserve_fraction · (device −
// weights) + reserve_bytes (the default, 10 % + 2 GiB, is `strata serve`'s default budget on a
// GPU: 0.9 of the free memory less the 2 GiB scratch reserve). The caches of one rank are those
// of the engine's memory planner (kvcache/memory_planner.h) for the rank's share: latent rows of
// every MLA layer (the whole latent row on every rank without DCP: kv_a_proj is replicated) and
// KDA states of its H/T heads, f32. Latent tokens per group = tokens per rank × C (each rank
// holds 1/C of each sequence's tokens; the T/C ranks with the same DCP index hold the same ones).
// A sequence of N tokens costs every rank of its group ceil(ceil(N/C)/block) latent blocks and
// one state slot; "sequences that fit" is the largest count PlanMemory accepts with that many
// slots, no checkpoints and that many blocks.
//
// Collectives per token (b = activation bytes; ring bus bytes per rank and call):
//   embedding all-reduce      T > 1: 1 per token, d·b, bus 2(T−1)/T
//   mixer all-reduce          T > 1: 1 per layer, d·b, bus 2(T−1)/T
//   FFN all-reduce            T > 1: 1 per layer, d·b, bus 2(T−1)/T
//   latent all-reduce         T > 1, LatentMoE: 1 per MoE layer, L·b (the experts' latent rows
//                             summed over the group before latent_norm), bus 2(T−1)/T
//   logits all-gather         T > 1: 1 per sampled token, T·ceil(V/T)·4 (f32 logits), bus (T−1)/T
//   expert dispatch, combine  D > 1: 1 each per MoE layer, top_k rows of X·b (every expert's row
//                             sent once: an upper bound); a token's rows leave its group for
//                             (D−1)/D of the experts under uniform routing: bus = rows·(D−1)/D
//                             (within a group every rank sees every token: no dispatch)
//   DCP query all-gather      C > 1: 1 per MLA layer, the C ranks' absorbed queries
//                             C·(H/T)·(r_kv+dr)·b, bus (C−1)/C
//   DCP output merge          C > 1: 1 per MLA layer, partial outputs and their log-sum-exp
//                             C·(H/T)·(r_kv·b + 4), bus (C−1)/C
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/latent_row.h"
#include "engine/model.h"
#include "engine/model_config.h"

namespace strata::engine {

struct ParallelPlanOptions {
  int tensor_parallel_size = 1;          // T
  int decode_context_parallel_size = 1;  // C, divides T
  int data_parallel_size = 1;            // D
  int64_t device_memory_bytes = 0;       // one rank's device
  WeightQuantization quantization = WeightQuantization::kNone;
  LatentDType kv_cache_dtype = LatentDType::kBF16;
  int activation_bytes = 4;  // element size of the activations collectives carry (f32)
  double reserve_fraction = 0.1;
  int64_t reserve_bytes = int64_t{2} << 30;
  int32_t max_num_seqs = 64;         // live state slots when counting latent tokens per rank
  int block_size = 64;               // tokens per latent page
  double checkpoint_fraction = 0.1;  // KDA checkpoints when counting tokens (prefix caching)
  int64_t sequence_tokens = int64_t{1} << 20;  // the long sequence counted in "sequences fit"
};

// Weight bytes of one rank by part (see the header comment).
struct PlanWeightBytes {
  int64_t embedding_lm_head = 0;
  int64_t mixers = 0;            // KDA and MLA projections, conv weights, A_log, dt_bias
  int64_t dense_mlp_shared = 0;  // dense MLPs and shared experts
  int64_t latent_moe = 0;        // LatentMoE latent_down / latent_up
  int64_t routed_experts = 0;
  int64_t norms_routers = 0;
  int64_t total() const {
    return embedding_lm_head + mixers + dense_mlp_shared + latent_moe + routed_experts +
           norms_routers;
  }
};

// One collective of a token's forward.
struct PlanCollective {
  std::string name;  // "mixer all-reduce"
  std::string per;   // what one call is per: "token", "layer", "MoE layer", "MLA layer"
  int64_t calls_per_token = 0;
  int64_t message_bytes = 0;  // per call: the buffer reduced / gathered / sent
  int64_t bus_bytes = 0;      // per call: bytes one rank sends (ring / expected off-group)
  int64_t message_bytes_per_token() const { return calls_per_token * message_bytes; }
  int64_t bus_bytes_per_token() const { return calls_per_token * bus_bytes; }
};

struct ParallelPlan {
  ParallelPlanOptions options;
  std::string model;  // "Kimi K3" / "Kimi-Linear"
  int world_size = 1;
  int num_layers = 0, num_kda_layers = 0, num_mla_layers = 0, num_moe_layers = 0;
  int kda_heads_per_rank = 0, mla_heads_per_rank = 0;
  int max_experts_per_rank = 0, min_experts_per_rank = 0;
  std::string routed_expert_format;          // "bf16", "mxfp4", "int8"
  std::string projection_format;             // "bf16", "int8"
  PlanWeightBytes weights;                   // rank 0
  int64_t reserve_bytes = 0;                 // per rank
  int64_t cache_bytes = 0;                   // per rank: device − weights − reserve
  int64_t latent_bytes_per_token = 0;        // per rank, all MLA layers
  int64_t kda_state_bytes_per_sequence = 0;  // per rank, all KDA layers (state + conv)
  int64_t cache_tokens_per_rank = 0;         // with max_num_seqs slots (+ checkpoints)
  int64_t cache_tokens_per_group = 0;        // × C
  int32_t state_slots = 0, checkpoints = 0;  // of that plan
  int64_t sequence_tokens_per_rank = 0;      // ceil(sequence_tokens / C)
  int64_t sequences_per_group = 0;           // long sequences that fit (each rank of the group)
  std::vector<PlanCollective> collectives;
  int64_t bus_bytes_per_token() const;  // Σ collectives
};

// InvalidArgument naming the flag and the counts: a head count T does not divide ("3 KDA heads
// cannot be split over --tensor-parallel-size 2"), C not dividing T, C > 1 without MLA layers,
// sizes below 1, --quantization compressed-tensors without MXFP4 experts in the config, device
// memory below the weights (by how much) or leaving nothing for the caches after the reserve,
// and a cache that cannot hold max_num_seqs state slots. `cfg` must pass Validate().
absl::StatusOr<ParallelPlan> PlanParallel(const ModelConfig& cfg,
                                          const ParallelPlanOptions& options);

// The plan as one JSON object (sizes in bytes).
std::string ParallelPlanJson(const ParallelPlan& plan);
// The plan as a human table (sizes in GiB / MiB, counts with thousands separators).
std::string ParallelPlanTable(const ParallelPlan& plan);

}  // namespace strata::engine
