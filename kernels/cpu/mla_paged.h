// A sequence's MLA latent context as it lies in a paged cache (engine/forward_batch.h):
//
//   pages [num_blocks, block_size, row bytes], rows in `dtype`'s format (core/latent_row.h)
//   row of position t = pages + (block_table[t / block_size] · block_size + t % block_size) · bytes
//   row κ_t = [ c_t (kv_lora_rank, post-norm) ; k_pe,t (qk_rope_head_dim) ], lat_w = 576 values
//
// The kernels read f32 rows in place through the block table; bf16 and fp8 rows are decoded a
// tile at a time into a per-thread buffer (GatherRows) — the rest of each kernel is the same —
// except decode over bf16 rows on an AVX512-BF16 CPU, which reads them in place as bf16 pairs
// (mla_decode.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/check.h"
#include "core/latent_row.h"

namespace strata::kernels::cpu {

struct PagedLatent {
  const void* pages = nullptr;
  const int32_t* block_table = nullptr;  // covers positions [0, num_tokens)
  int block_size = 0;                    // tokens per block
  int64_t num_tokens = 0;                // context length (positions 0 .. num_tokens − 1)
  LatentDType dtype = LatentDType::kF32;
  int rope_dim = 0;  // the rows' rope part (qk_rope_head_dim); only bf16/fp8 layouts need it

  // Bytes of one row (hoist it out of loops over rows).
  int64_t RowBytes(int lat_w) const { return LatentBytesPerToken(dtype, lat_w, rope_dim); }
  // The encoded row of position `pos`, rows being `row_bytes` long.
  const std::byte* RowAt(int64_t pos, int64_t row_bytes) const {
    const int64_t block = block_table[pos / block_size];
    return static_cast<const std::byte*>(pages) +
           (block * block_size + pos % block_size) * row_bytes;
  }
  const std::byte* RawRow(int64_t pos, int lat_w) const { return RowAt(pos, RowBytes(lat_w)); }
  // The row of position `pos` in place; f32 caches only.
  const float* Row(int64_t pos, int lat_w) const {
    DCHECK(dtype == LatentDType::kF32);
    return reinterpret_cast<const float*>(RawRow(pos, lat_w));
  }
};

inline constexpr int kMaxGatherRows = 256;

// rows[j] = the f32 row of position row0 + j, j < n ≤ kMaxGatherRows: a pointer into the pages
// for an f32 cache, else into this thread's decode buffer (valid until the thread's next call;
// the buffer only grows, so a warm thread allocates nothing).
void GatherRows(const PagedLatent& ctx, int64_t row0, int n, int lat_w, const float** rows);

// The first `num_tokens` rows as one contiguous f32 array [num_tokens, lat_w] (the reference
// paths under STRATA_ISA=scalar).
void CopyRowsF32(const PagedLatent& ctx, int lat_w, float* out);

}  // namespace strata::kernels::cpu
