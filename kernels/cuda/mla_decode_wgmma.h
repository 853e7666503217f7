// MLA paged decode on Hopper's warpgroup MMA (internal to mla_decode.cu; sm_90a and the
// emulator). Same function and partial-result layout as MlaDecodeKernel (mla_decode.h), in the
// transposed form: per 64-token page the scores are Sᵀ = K · Q̃ᵀ (m64 = the page's tokens,
// N = the CTA's heads) and the output Oᵀ += Vᵀ · Pᵀ (m64 tiles of the 512 value dims, N = heads).
// The page is the A operand, fed from registers (ldmatrix from a plain row-major copy, or fp8
// codes decoded straight into the fragments), so pages arrive by plain bulk copies (TMA engine,
// mbarrier completion) and no tensor map or swizzled layout is needed; Q̃ and P are the shared-
// memory B operands. Every head of a tile (up to 48: all of a TP rank's heads, K3's 96 in two
// tiles) shares one read of each page, where the mma.sync kernel reads a page once per 32 heads.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/mla_decode.h"

namespace strata::kernels::cuda::internal {

struct MlaWgmmaLaunch {
  const uint16_t* q_abs = nullptr;
  const void* kv_cache = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* query_seq = nullptr;  // null: query b reads table row b
  const int32_t* seq_lens = nullptr;
  int batch = 0;
  int num_heads = 0;
  int max_blocks_per_seq = 0;
  int pages_per_split = 0;
  int num_splits = 0;
  float scale = 0.0f;
  float* o_part = nullptr;    // [batch, splits, H, 512]
  float* lse_part = nullptr;  // [batch, splits, H], log2 domain
};

// Heads per CTA (16, 32 or 48) the kernel uses for `num_heads`.
int MlaWgmmaHeadTile(int num_heads);

// Grid (ceil(H / tile), splits, batch) of 512-thread CTAs; `fp8`: the cache holds fp8 rows.
absl::Status LaunchMlaDecodeWgmma(const MlaWgmmaLaunch& launch, bool fp8, cudaStream_t stream);

}  // namespace strata::kernels::cuda::internal
