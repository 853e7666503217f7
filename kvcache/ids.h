// Identifier types shared by the kvcache bookkeeping (pure CPU; no device types).
//
//   BlockId       index of one MLA latent page, 0 <= id < num_blocks (the same index in every
//                 MLA layer's page array, see cache_layout.h)
//   SlotId        index of one live KDA state slot, 0 <= id < num_slots
//   CheckpointId  index of one KDA checkpoint slot, 0 <= id < num_checkpoints
//   BlockHash     chained 64-bit hash of a full block and everything before it (block_hash.h)
#pragma once

#include <cstdint>

namespace strata::kvcache {

using BlockId = int32_t;
using SlotId = int32_t;
using CheckpointId = int32_t;
using BlockHash = uint64_t;

// Number of blocks that hold `num_tokens` tokens: ceil(num_tokens / block_size).
inline int32_t NumBlocksFor(int64_t num_tokens, int block_size) {
  return static_cast<int32_t>((num_tokens + block_size - 1) / block_size);
}

}  // namespace strata::kvcache
