// Which ranks hold which routed experts (docs/architecture.md, "Parallelism": MoE is
// expert-parallel with optional redundant replicas of hot experts).
//
// One placement serves every MoE layer of the model: expert e of every layer lives on the same
// ranks (the layers have the same expert count, and routing statistics are per expert id, so a
// per-layer map would only matter for per-layer hot-expert replication, which nothing needs
// yet).
//
//   replicas[e] = ranks holding a copy of expert e (ascending, at least one)
//   local[r]    = experts rank r holds (ascending; may be empty when ranks > experts)
//
// Which replica runs a token is decided by RankFor(): the origin rank's own copy when it has
// one (no traffic), otherwise replicas[e][(origin_rank + row) % num_replicas], so both the
// ranks and the rows of one rank spread over the copies. Every replica holds the same weights,
// so the result does not depend on which replica ran.
//
// A placement file (LoadPlacement) starts from EvenPlacement() or an explicit `home` list and
// adds replicas:
//   {
//     "num_experts": 8,            // optional; must equal the model's expert count
//     "world_size": 4,             // optional; must equal the group's size
//     "home": [0,0,1,1,2,2,3,3],   // optional; owner rank of each expert (default: even split)
//     "replicas": [                // optional; extra copies of hot experts
//       {"expert": 5, "ranks": [0, 3]}
//     ]
//   }
// Unknown keys, out-of-range experts or ranks, and a replica on a rank that already holds that
// expert are errors naming the file, the field and the limit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::dist {

struct ExpertPlacement {
  int num_experts = 0;
  int world_size = 0;
  std::vector<std::vector<int>> replicas;  // [num_experts] → ranks, ascending
  std::vector<std::vector<int>> local;     // [world_size] → experts, ascending

  // True when rank `rank` holds a copy of expert `expert`.
  bool Holds(int rank, int expert) const;
  // The rank that runs expert `expert` for local row `row` of rank `origin_rank` (see above).
  int RankFor(int expert, int origin_rank, int64_t row) const;
  // Total copies over all experts (num_experts + redundant replicas).
  int num_copies() const;
  // "rank 0: 0-3 | rank 1: 4-6 +5" style summary for logs.
  std::string DebugString() const;
};

// Builds a placement from each expert's replica ranks (sorted and checked: every expert has ≥1
// rank, ranks in [0, world_size), no rank twice). `what` prefixes error messages.
absl::StatusOr<ExpertPlacement> PlacementFromReplicas(std::vector<std::vector<int>> replicas,
                                                      int world_size,
                                                      const std::string& what = "placement");

// Contiguous split without replicas: the first num_experts % world_size ranks take one expert
// more (7 experts on 2 ranks: 0-3 on rank 0, 4-6 on rank 1). CHECKs num_experts ≥ 1 and
// world_size ≥ 1.
ExpertPlacement EvenPlacement(int num_experts, int world_size);

// Reads the JSON file described above. InvalidArgument / NotFound with the file name, the field
// and the limit on any problem.
absl::StatusOr<ExpertPlacement> LoadPlacement(const std::string& path, int num_experts,
                                              int world_size);
// Same, from JSON text (`source` names it in errors).
absl::StatusOr<ExpertPlacement> ParsePlacement(const std::string& json_text,
                                               const std::string& source, int num_experts,
                                               int world_size);
// The placement as a file LoadPlacement reads back to an equal placement (explicit `home`: the
// first rank of each expert; the other ranks as replicas).
std::string PlacementToJson(const ExpertPlacement& placement);

// EvenPlacement(measured_tokens.size(), world_size) plus up to `num_replicas` redundant copies,
// chosen greedily: repeatedly take the expert with the highest tokens per copy (ties: lowest
// id) that some rank still lacks, and put a copy on the rank with the lowest estimated load
// (Σ tokens / copies over the experts it holds; ties: lowest rank) among those lacking it.
// Stops early when every rank holds every expert. `measured_tokens[e]` ≥ 0 (e.g. summed
// ForwardContext.expert_tokens over a window, all-reduced over the group).
ExpertPlacement PlaceWithReplicas(const std::vector<int64_t>& measured_tokens, int world_size,
                                  int num_replicas);

}  // namespace strata::dist
