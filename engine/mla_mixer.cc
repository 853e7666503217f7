#include <cmath>
#include <cstring>
#include <vector>

#include "engine/mixers.h"
#include "kernels/reference/kda_gate.h"
#include "kernels/reference/mla.h"
#include "kernels/reference/rms_norm.h"

namespace strata::engine {
namespace {

constexpr float kLatentNormEps = 1e-6f;  // q_a_layernorm / kv_a_layernorm (MODEL.md §4.1)

// Pointer to the cache row of token position `pos` in one MLA layer's page pool.
float* LatentRow(const SequenceCacheView& cache, float* pages, int64_t pos, int latent_dim) {
  const int64_t block = cache.block_table[pos / cache.block_size];
  return pages + (block * cache.block_size + pos % cache.block_size) * latent_dim;
}

}  // namespace

void MlaMixerForward(const ModelConfig& cfg, const MlaWeights& w, const float* x, int64_t num_rows,
                     ForwardBatch batch, absl::Span<const RowSpan> rows, int mla_index, float* out,
                     [[maybe_unused]] Workspace& ws) {
  const MlaConfig& m = cfg.mla;
  const int64_t heads = m.num_heads, qk = m.qk_head_dim(), dv = m.v_head_dim;
  const int latent_dim = m.latent_dim();
  const size_t n = static_cast<size_t>(num_rows);

  std::vector<float> q(n * heads * qk);
  if (m.q_lora_rank > 0) {
    std::vector<float> cq(n * m.q_lora_rank);
    LinearForward(w.q_a_proj, x, num_rows, cq.data());
    kernels::RmsNormReference(cq.data(), num_rows, m.q_lora_rank, w.q_a_norm.data(), kLatentNormEps,
                              cq.data());
    LinearForward(w.q_b_proj, cq.data(), num_rows, q.data());
  } else {
    LinearForward(w.q_proj, x, num_rows, q.data());
  }
  // κ = [RMSNorm(c) ; k_pe]: only the latent part is normalised (MODEL.md §9.1 #7).
  std::vector<float> kv(n * latent_dim);
  LinearForward(w.kv_a_proj, x, num_rows, kv.data());
  for (size_t r = 0; r < n; ++r) {
    float* row = kv.data() + r * latent_dim;
    kernels::RmsNormReference(row, 1, m.kv_lora_rank, w.kv_a_norm.data(), kLatentNormEps, row);
  }

  const kernels::MlaDims dims{m.num_heads, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim,
                              m.kv_lora_rank};
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk));
  std::vector<float> o(n * heads * dv), context;
  for (size_t s = 0; s < batch.size(); ++s) {
    const ForwardSequence& seq = batch[s];
    const int64_t t = rows[s].count;
    if (t == 0) continue;
    float* pages = seq.cache.mla_pages[static_cast<size_t>(mla_index)];
    const int64_t start = seq.num_computed_tokens, num_ctx = start + t;
    for (int64_t i = 0; i < t; ++i) {
      std::memcpy(LatentRow(seq.cache, pages, start + i, latent_dim),
                  kv.data() + (rows[s].offset + i) * latent_dim, latent_dim * sizeof(float));
    }
    context.resize(static_cast<size_t>(num_ctx * latent_dim));
    for (int64_t pos = 0; pos < num_ctx; ++pos) {
      std::memcpy(context.data() + pos * latent_dim, LatentRow(seq.cache, pages, pos, latent_dim),
                  latent_dim * sizeof(float));
    }
    const float* q_seq = q.data() + rows[s].offset * heads * qk;
    float* o_seq = o.data() + rows[s].offset * heads * dv;
    // Decode reads the compact 576-wide cache (absorbed); prefill expands per head.
    if (t == 1) {
      kernels::MlaAttentionAbsorbedReference(q_seq, context.data(), num_ctx, t, w.kv_b_proj.data(),
                                             dims, scale, o_seq);
    } else {
      kernels::MlaAttentionReference(q_seq, context.data(), num_ctx, t, w.kv_b_proj.data(), dims,
                                     scale, o_seq);
    }
  }
  // The output gate sits between W_UV and o_proj (MODEL.md §4.5).
  if (!w.g_proj.empty()) {
    std::vector<float> gate(n * heads * dv);
    LinearForward(w.g_proj, x, num_rows, gate.data());
    kernels::SigmoidReference(gate.data(), static_cast<int64_t>(gate.size()), gate.data());
    for (size_t i = 0; i < o.size(); ++i) o[i] *= gate[i];
  }
  LinearForward(w.o_proj, o.data(), num_rows, out);
}

}  // namespace strata::engine
