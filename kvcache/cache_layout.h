// CacheLayout: the contract between the kvcache bookkeeping (which hands out BlockIds, SlotIds
// and CheckpointIds) and the executor / kernels (which own the bytes). Plain data plus size and
// offset arithmetic; produced by PlanMemory (memory_planner.h).
//
// One device arena per data-parallel rank holds all caches, regions in this order, each region
// starting at a multiple of kRegionAlignmentBytes:
//
//   offset 0
//   +-- MLA layer 0 pages  [num_blocks][block_size][latent row]    MlaLayerOffset(0)
//   +-- MLA layer 1 pages                                          MlaLayerOffset(1)
//   |   ...                                    (one region per MLA layer, all the same size)
//   +-- KDA layer 0 state  [num_state_rows][kda_state_bytes_per_layer]  KdaStateOffset(0)
//   +-- KDA layer 0 conv   [num_state_rows][kda_conv_bytes_per_layer]   KdaConvOffset(0)
//   +-- KDA layer 1 state / conv ...
//   +-- TotalBytes()
//
// Layer indices count MLA layers (resp. KDA layers) only, in model order, not model layer ids.
// BlockId b is page b in every MLA layer's region (the FlashMLA layout [num_blocks, 64, 576]).
//
// Latent row (one token of one MLA layer): core/latent_row.h (f32, bf16, or FlashMLA's 656-byte
// fp8 layout at latent_dim 576).
//
// State rows: row r in [0, num_slots) is live slot r (SlotId); row num_slots + c is
// checkpoint c (CheckpointId) for c < num_checkpoints, and checkpoint ids num_checkpoints + s
// are live slot s's row, lent to the prefix cache while no sequence holds it (prefix_cache.h).
// A prefix hit copies row CheckpointRow(c) -> SlotRow(s), and saving a checkpoint copies the
// other way, in the state and conv regions of every KDA layer.
// The inner layout of a row (e.g. S [H, 128, 128] f32) belongs to the KDA kernels; this
// header only knows its size in bytes. Under KDA head-TP all per-layer sizes are per rank.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/latent_row.h"
#include "kvcache/ids.h"

namespace strata::kvcache {

using strata::LatentBytesPerToken;
using strata::LatentDType;
using strata::LatentDTypeName;

inline constexpr int64_t kRegionAlignmentBytes = 256;

// A byte range of the cache arena.
struct CacheSpan {
  int64_t offset = 0;
  int64_t bytes = 0;
};

struct CacheLayout {
  int32_t num_mla_layers = 0;
  int32_t latent_dim = 576;  // kv_lora_rank + rope_dim
  int32_t rope_dim = 64;     // qk_rope_head_dim
  int32_t block_size = 64;   // tokens per page
  int32_t num_blocks = 0;
  LatentDType latent_dtype = LatentDType::kBF16;

  int32_t num_kda_layers = 0;
  int64_t kda_state_bytes_per_layer = 0;  // one row of one KDA layer's state region
  int64_t kda_conv_bytes_per_layer = 0;   // one row of one KDA layer's conv region
  int32_t num_slots = 0;
  int32_t num_checkpoints = 0;

  // ---- derived sizes (bytes unless named otherwise) ----
  int64_t latent_bytes_per_token() const {
    return LatentBytesPerToken(latent_dtype, latent_dim, rope_dim);
  }
  int64_t page_bytes() const { return latent_bytes_per_token() * block_size; }
  int64_t mla_layer_bytes() const { return page_bytes() * num_blocks; }
  // Latent bytes of one token over all MLA layers.
  int64_t mla_bytes_per_token() const { return latent_bytes_per_token() * num_mla_layers; }
  int64_t num_tokens() const { return static_cast<int64_t>(num_blocks) * block_size; }

  int32_t num_state_rows() const { return num_slots + num_checkpoints; }
  int32_t SlotRow(SlotId slot) const { return slot; }
  // Valid checkpoint ids: the checkpoint rows, then the live slots' rows.
  int32_t num_checkpoint_ids() const { return num_checkpoints + num_slots; }
  int32_t CheckpointRow(CheckpointId checkpoint) const {
    return checkpoint < num_checkpoints ? num_slots + checkpoint : checkpoint - num_checkpoints;
  }
  // One sequence's KDA state over all KDA layers (state + conv).
  int64_t state_bytes_per_sequence() const {
    return (kda_state_bytes_per_layer + kda_conv_bytes_per_layer) * num_kda_layers;
  }

  // ---- arena offsets ----
  int64_t MlaLayerOffset(int32_t mla_layer) const;
  int64_t KdaStateOffset(int32_t kda_layer) const;
  int64_t KdaConvOffset(int32_t kda_layer) const;
  int64_t TotalBytes() const;

  // ---- one unit's bytes, for copies to and from the offload tiers (kvcache/offload) ----
  // Block b: its page in every MLA layer, layer 0 first (num_mla_layers spans of page_bytes()).
  void BlockSpans(BlockId block, std::vector<CacheSpan>* spans) const;
  // State row r: its state row, then its conv row, in every KDA layer, layer 0 first.
  void StateRowSpans(int32_t row, std::vector<CacheSpan>* spans) const;
  int64_t block_bytes() const { return page_bytes() * num_mla_layers; }

  // Non-negative counts, block_size > 0, a valid latent row, KDA row sizes > 0 when there are
  // KDA layers.
  absl::Status Validate() const;
};

// Rounds `bytes` up to a multiple of kRegionAlignmentBytes.
inline int64_t AlignRegion(int64_t bytes) {
  return (bytes + kRegionAlignmentBytes - 1) / kRegionAlignmentBytes * kRegionAlignmentBytes;
}

}  // namespace strata::kvcache
