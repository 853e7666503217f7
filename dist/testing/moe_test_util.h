// Synthetic routed-expert blocks and per-rank inputs for the expert-parallel exchange tests
// and benchmark (not for production code).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dist/expert_placement.h"
#include "engine/linear.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"

namespace strata::dist::testing {

// An f32 [out, in] weight with values value(o, i), owning its memory.
engine::Linear F32Linear(int64_t out, int64_t in,
                         const std::function<float(int64_t, int64_t)>& value);

// A routed-expert block of `num_experts` random f32 experts (hidden 40, expert width 24).
// latent: LatentMoE with SiTU-GLU (expert input width 28 ≠ hidden 40, as in K3); otherwise
// SwiGLU experts on the full hidden width 40. Same arguments → same weights.
struct TinyMoe {
  engine::ModelConfig cfg;
  engine::MoeWeights w;
  int64_t width = 0;  // expert input/output width (z row length)
};
TinyMoe MakeMoe(int num_experts, int top_k, bool latent, uint32_t seed);

enum class Routing {
  kRandom,                // top_k distinct random experts per row (like the router)
  kAllToExpert0,          // every row to expert 0 (top_k must be 1)
  kOneExpertPerRankSlot,  // slot j → a distinct expert held by rank j (top_k == world_size)
};

// One rank's rows: z [rows, width] in [-1, 1), ids [rows, top_k], weights [rows, top_k] in
// [0.1, 1). Same arguments → same input.
struct RankInput {
  std::vector<float> z;
  std::vector<int32_t> ids;
  std::vector<float> weights;
  int64_t rows = 0;
};
RankInput MakeInput(const TinyMoe& moe, int64_t rows, Routing routing,
                    const ExpertPlacement& placement, uint32_t seed);

// The inputs of all ranks concatenated in rank order (the one-rank reference's batch).
RankInput Concatenate(const std::vector<RankInput>& inputs);

}  // namespace strata::dist::testing
