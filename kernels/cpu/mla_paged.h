// A sequence's MLA latent context as it lies in a paged cache (engine/forward_batch.h):
//
//   pages [num_blocks, block_size, lat_w] f32, lat_w = kv_lora_rank + qk_rope_head_dim (576)
//   row of position t = pages + (block_table[t / block_size] · block_size + t % block_size) · lat_w
//   row κ_t = [ c_t (kv_lora_rank, post-norm) ; k_pe,t (qk_rope_head_dim) ]
//
// The kernels read rows in place through the block table; nothing is copied out.
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

struct PagedLatent {
  const float* pages = nullptr;
  const int32_t* block_table = nullptr;  // covers positions [0, num_tokens)
  int block_size = 0;                    // tokens per block
  int64_t num_tokens = 0;                // context length (positions 0 .. num_tokens − 1)

  const float* Row(int64_t pos, int lat_w) const {
    const int64_t block = block_table[pos / block_size];
    return pages + (block * block_size + pos % block_size) * lat_w;
  }
};

}  // namespace strata::kernels::cpu
