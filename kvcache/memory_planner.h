// Memory planner: from the model's cache shapes, the dtype choices and a byte budget, how many
// latent tokens, live state slots and KDA checkpoints fit in one rank's cache arena.
//
// Arithmetic (all integer, bytes; the test recomputes it by hand):
//   slot_bytes      = num_kda_layers * (kda_state_bytes_per_layer + kda_conv_bytes_per_layer)
//   usable          = memory_budget_bytes
//                     - (num_mla_layers + 2 * num_kda_layers) * kRegionAlignmentBytes
//                       (worst-case padding of the arena's regions, cache_layout.h)
//   num_slots       = max_num_seqs              (every running sequence needs one slot)
//   rest            = usable - num_slots * slot_bytes      (an error when negative)
//   num_checkpoints = slot_bytes > 0 ? floor(rest * checkpoint_fraction) / slot_bytes : 0
//   rest           -= num_checkpoints * slot_bytes
//   num_blocks      = rest / (num_mla_layers * block_size * latent bytes per token)
//                     (0 without MLA layers; an error when it is 0 with MLA layers, or when
//                     num_blocks * block_size < min_num_tokens)
// The result's TotalBytes() never exceeds the budget.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kvcache/cache_layout.h"

namespace strata::kvcache {

// Cache shapes of one model on one rank. Plain data; the engine fills it from the config.
struct ModelCacheSpec {
  int32_t num_mla_layers = 0;
  int32_t latent_dim = 576;  // kv_lora_rank + rope_dim
  int32_t rope_dim = 64;     // qk_rope_head_dim (core/latent_row.h)
  LatentDType latent_dtype = LatentDType::kBF16;
  int32_t num_kda_layers = 0;
  int64_t kda_state_bytes_per_layer = 0;  // KdaStateBytes(...)
  int64_t kda_conv_bytes_per_layer = 0;   // KdaConvBytes(...)
};

// Recurrent state S of one KDA layer: num_heads * head_dim^2 values (dk = dv = head_dim),
// e.g. K3: 96 * 128 * 128 * 4 = 6 MiB (f32).
inline int64_t KdaStateBytes(int32_t num_heads, int32_t head_dim, int32_t bytes_per_value) {
  return int64_t{num_heads} * head_dim * head_dim * bytes_per_value;
}
// Conv cache of one KDA layer: the last (kernel_size - 1) pre-conv rows of q, k and v, each
// num_heads * head_dim wide, e.g. K3: 3 * 12288 * 3 * 2 = 216 KiB (bf16).
inline int64_t KdaConvBytes(int32_t num_heads, int32_t head_dim, int32_t conv_kernel_size,
                            int32_t bytes_per_value) {
  return int64_t{3} * num_heads * head_dim * (conv_kernel_size - 1) * bytes_per_value;
}

struct PlannerOptions {
  int64_t memory_budget_bytes = 0;  // for all caches of this rank
  int block_size = 64;              // tokens per latent page
  int32_t max_num_seqs = 256;       // running sequences at once = live state slots
  // max_num_seqs is a default, not the user's: when its live slots would take more than a
  // quarter of the budget, plan fewer (at least 1) so the latent pages keep the rest; the
  // layout's num_slots says how many (the caller caps its max_num_seqs to it).
  bool fit_max_num_seqs = false;
  // Share of the budget left after the live slots that goes to KDA checkpoints, in [0, 1);
  // 0 disables checkpoints (and so prefix hits on KDA models).
  double checkpoint_fraction = 0.1;
  // When > 0, fail unless at least this many latent tokens fit (e.g. max_model_len).
  int64_t min_num_tokens = 0;
};

absl::StatusOr<CacheLayout> PlanMemory(const ModelCacheSpec& spec, const PlannerOptions& options);

// The layout of `spec` with pool sizes given directly (what PlanMemory derives from a budget):
// for tests and benchmarks that size the caches themselves.
CacheLayout LayoutWithPools(const ModelCacheSpec& spec, int block_size, int32_t num_blocks,
                            int32_t num_slots, int32_t num_checkpoints);

// One line for the start-up log and the info endpoints, e.g.
//   latent cache: 1,234,560 tokens (1.2 1M-token sequences) in 19,290 bf16 blocks of 64;
//   96 state slots (428.6 MiB each); 12 KDA checkpoints (+ idle state slots); 70.13 GiB
// "1M-token sequences" = tokens / 1,048,576.
std::string DescribePlan(const CacheLayout& layout);

// 1234567 -> "1,234,567" (also negative numbers).
std::string FormatWithThousands(int64_t value);
// 1536 -> "1.50 KiB"; below 1 KiB: "512 B".
std::string FormatBytes(int64_t bytes);

}  // namespace strata::kvcache
