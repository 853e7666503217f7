// Gated MLA attention core, NoPE (docs/model.md §4). One sequence.
//
// Dims: H heads, dn = qk_nope_head_dim, dr = qk_rope_head_dim, dv = v_head_dim, r = kv_lora_rank.
// latent: [num_ctx, r + dr] rows κ_j = [c_j (post-norm latent, r) ; k_pe_j (dr)] for every
//         context token, including the new ones (they are the last `num_new` rows).
// q:      [num_new, H, dn + dr] per head [q_nope ; q_pe].
// w_kvb:  [H·(dn + dv), r] (kv_b_proj): rows of head h = [W_UK,h (dn rows) ; W_UV,h (dv rows)].
// o:      [num_new, H·dv] (before the output gate and o_proj).
// Query t (0-based among the new tokens) sits at position num_ctx − num_new + t and attends
// to context rows 0..that position (causal). scale = (dn + dr)^-1/2 for Kimi (no YaRN).
#pragma once

#include <cstdint>

namespace strata::kernels {

struct MlaDims {
  int num_heads;
  int qk_nope_head_dim;
  int qk_rope_head_dim;
  int v_head_dim;
  int kv_lora_rank;
};

// Non-absorbed ("MHA mode"): expands k_nope and v per head from the latent, then softmax.
void MlaAttentionReference(const float* q, const float* latent, int64_t num_ctx, int64_t num_new,
                           const float* w_kvb, const MlaDims& dims, float scale, float* o);

// Absorbed ("MQA mode"): q̃_h = [W_UK,hᵀ q_nope ; q_pe] over the 576-wide latent, softmax,
// ō_h = Σ p_j c_j, o_h = W_UV,h ō_h. Same result as MlaAttentionReference up to rounding.
void MlaAttentionAbsorbedReference(const float* q, const float* latent, int64_t num_ctx,
                                   int64_t num_new, const float* w_kvb, const MlaDims& dims,
                                   float scale, float* o);

}  // namespace strata::kernels
