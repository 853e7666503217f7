#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "engine/mixers.h"
#include "kernels/cpu/latent_codec.h"
#include "kernels/cpu/mla_context_parallel.h"
#include "kernels/cpu/mla_decode.h"
#include "kernels/cpu/mla_prefill.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/reference/mla.h"

namespace strata::engine {
namespace {

constexpr float kLatentNormEps = 1e-6f;  // q_a_layernorm / kv_a_layernorm (docs/model.md §4.1)

kernels::cpu::PagedLatent Context(const ForwardSequence& seq, int mla_index, int64_t num_tokens) {
  return {seq.cache.mla_pages[static_cast<size_t>(mla_index)],
          seq.cache.block_table,
          seq.cache.block_size,
          num_tokens,
          seq.cache.latent_dtype,
          seq.cache.rope_dim};
}

// κ = [RMSNorm(c) ; k_pe] for every new token (only the latent part is normalised, docs/model.md
// §9.1 #7), encoded into its cache row in the cache's format (in place for f32). kv: the rows'
// kv_a_proj outputs [c ; k_pe].
// With decode context parallelism (`cp`) only this rank's positions are written, at their local
// rows (position p at row p / C).
void WriteLatents(const MlaConfig& m, const MlaWeights& w, const float* kv, ForwardBatch batch,
                  absl::Span<const RowSpan> rows, int mla_index, const ContextParallelShard& cp,
                  Workspace& ws) {
  WorkspaceScope scope(ws);
  const int latent_dim = m.latent_dim();
  float* normed = ws.Floats(latent_dim);
  for (size_t s = 0; s < batch.size(); ++s) {
    const ForwardSequence& seq = batch[s];
    const LatentDType dtype = seq.cache.latent_dtype;
    const int64_t row_bytes = LatentBytesPerToken(dtype, latent_dim, m.qk_rope_head_dim);
    std::byte* pages = seq.cache.mla_pages[static_cast<size_t>(mla_index)];
    for (int64_t i = 0; i < rows[s].count; ++i) {
      int64_t pos = seq.num_computed_tokens + i;
      if (pos % cp.size != cp.rank) continue;  // another rank's row
      pos /= cp.size;
      const int64_t block = seq.cache.block_table[pos / seq.cache.block_size];
      std::byte* row =
          pages + (block * seq.cache.block_size + pos % seq.cache.block_size) * row_bytes;
      float* kappa = dtype == LatentDType::kF32 ? reinterpret_cast<float*>(row) : normed;
      const float* src = kv + (rows[s].offset + i) * latent_dim;
      kernels::cpu::RmsNorm(src, 1, m.kv_lora_rank, w.kv_a_norm.data(), kLatentNormEps, kappa);
      std::memcpy(kappa + m.kv_lora_rank, src + m.kv_lora_rank, sizeof(float) * m.qk_rope_head_dim);
      if (dtype != LatentDType::kF32) {
        kernels::cpu::EncodeLatentRow(dtype, kappa, latent_dim, m.qk_rope_head_dim, row);
      }
    }
  }
}

// Row h·(dn + dv) + k of kv_b_proj as f32 (f32 or bf16 storage).
void KvbRow(const Linear& kvb, int64_t row, float* out) { EmbeddingRow(kvb, row, out); }

// Attention of every new row when the latent rows are spread over the group by position
// (mla_context_parallel.h): q̃ of this rank's heads → all-gather (every head of the group) →
// partial attention over this rank's rows → all-to-all (each partial to its head's rank) →
// log-sum-exp merge → W_UV, gate. Writes o [num_rows, heads·dv].
// With C < T (the tensor-parallel group of T ranks holds T / C copies of each position's row)
// the ranks g·C … g·C + C − 1 form context-parallel group g, which holds every position once and
// has its own communicator (TensorParallelGroup::context_parallel): both collectives span its
// C ranks only.
void AttendContextParallel(const MlaConfig& m, const MlaWeights& w, const float* q,
                           const float* gate, int64_t num_rows, ForwardBatch batch,
                           absl::Span<const RowSpan> rows, int mla_index,
                           const MlaContextParallel& cp, float scale, float* o, Workspace& ws) {
  WorkspaceScope scope(ws);
  const int64_t heads = m.num_heads, dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim,
                dv = m.v_head_dim, r = m.kv_lora_rank, lat = m.latent_dim(), qk = dn + dr;
  const int cp_size = cp.shard.size;  // the group's ranks: those sharing this rank's positions
  CHECK_EQ(cp.group->size(), cp_size);
  // q̃_h = [W_UK,hᵀ q_nope,h ; q_pe,h] for this rank's heads.
  float* qa = ws.Floats(num_rows * heads * lat);
  std::fill(qa, qa + num_rows * heads * lat, 0.0f);
  float* wrow = ws.Floats(r);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t n = 0; n < dn; ++n) {
      KvbRow(w.kv_b_proj, h * (dn + dv) + n, wrow);
      for (int64_t t = 0; t < num_rows; ++t) {
        const float qn = q[(t * heads + h) * qk + n];
        float* out = qa + (t * heads + h) * lat;
#pragma omp simd
        for (int64_t k = 0; k < r; ++k) out[k] += qn * wrow[k];
      }
    }
    for (int64_t t = 0; t < num_rows; ++t) {
      std::copy_n(q + (t * heads + h) * qk + dn, dr, qa + (t * heads + h) * lat + r);
    }
  }
  // Every rank's queries: [C][num_rows][heads][lat].
  float* all_q = ws.Floats(cp_size * num_rows * heads * lat);
  if (num_rows > 0) cp.group->AllGather(qa, num_rows * heads * lat, all_q);
  // Partials of rank c's heads over this rank's rows: send[c] = [num_rows][heads][r + 1].
  const int64_t part = num_rows * heads * (r + 1);
  float* send = ws.Floats(cp_size * part);
  float* recv = ws.Floats(cp_size * part);
  auto* seqs = ws.Array<kernels::cpu::MlaPartialSequence>(static_cast<int64_t>(batch.size()));
  for (int c = 0; c < cp_size; ++c) {
    int64_t n = 0;
    for (size_t s = 0; s < batch.size(); ++s) {
      if (rows[s].count == 0) continue;
      const ForwardSequence& seq = batch[s];
      const int64_t local = cp.shard.LocalRows(seq.num_computed_tokens + rows[s].count);
      seqs[n++] = {Context(seq, mla_index, local), seq.num_computed_tokens, rows[s].count,
                   all_q + (c * num_rows + rows[s].offset) * heads * lat,
                   send + c * part + rows[s].offset * heads * (r + 1)};
    }
    kernels::cpu::MlaPartialAttention(static_cast<int>(heads), static_cast<int>(lat),
                                      static_cast<int>(r), scale, cp_size, cp.shard.rank,
                                      absl::MakeConstSpan(seqs, n));
  }
  if (num_rows > 0) cp.group->AllToAll(send, recv, part);
  float* merged = ws.Floats(num_rows * heads * r);
  kernels::cpu::MlaMergePartials(recv, cp_size, num_rows * heads, static_cast<int>(r), merged);
  // o_h = W_UV,h ō_h (⊙ sigmoid(g_h)).
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t e = 0; e < dv; ++e) {
      KvbRow(w.kv_b_proj, h * (dn + dv) + dn + e, wrow);
      for (int64_t t = 0; t < num_rows; ++t) {
        const float* ob = merged + (t * heads + h) * r;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t k = 0; k < r; ++k) sum += ob[k] * wrow[k];
        const int64_t at = (t * heads + h) * dv + e;
        o[at] = gate != nullptr ? sum / (1.0f + std::exp(-gate[at])) : sum;
      }
    }
  }
}

}  // namespace

// Decode sequences (one new token) go through one batched flash-decoding call over the paged
// cache, prefill chunks through one batched tiled prefill call; both read the cache in place
// and apply the output gate in their epilogue (docs/model.md §4.5: between W_UV and o_proj).
void MlaMixerForward(const ModelConfig& cfg, const MlaWeights& w, const float* x, int64_t num_rows,
                     ForwardBatch batch, absl::Span<const RowSpan> rows, int mla_index, float* out,
                     Workspace& ws, const MlaContextParallel* cp) {
  WorkspaceScope scope(ws);
  const MlaConfig& m = cfg.mla;
  const int64_t heads = m.num_heads, qk = m.qk_head_dim(), dv = m.v_head_dim;

  // Every projection of x in one kernel call: the queries (or their LoRA input c_q), the
  // latents [c ; k_pe] and the gate logits (the kernels apply the sigmoid).
  float* q = ws.Floats(num_rows * heads * qk);
  float* kv = ws.Floats(num_rows * m.latent_dim());
  float* cq = m.q_lora_rank > 0 ? ws.Floats(num_rows * m.q_lora_rank) : nullptr;
  float* gate = !w.g_proj.empty() ? ws.Floats(num_rows * heads * dv) : nullptr;
  LinearProduct of_x[3] = {
      cq != nullptr ? LinearProduct{&w.q_a_proj, x, cq} : LinearProduct{&w.q_proj, x, q},
      {&w.kv_a_proj, x, kv}};
  if (gate != nullptr) of_x[2] = {&w.g_proj, x, gate};
  LinearForwardAll(absl::MakeConstSpan(of_x, gate != nullptr ? 3 : 2), num_rows);
  if (cq != nullptr) {  // q through the q LoRA
    kernels::cpu::RmsNorm(cq, num_rows, m.q_lora_rank, w.q_a_norm.data(), kLatentNormEps, cq);
    LinearForward(w.q_b_proj, cq, num_rows, q);
  }
  WriteLatents(m, w, kv, batch, rows, mla_index, cp != nullptr ? cp->shard : ContextParallelShard{},
               ws);

  float* o = ws.Floats(num_rows * heads * dv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk));
  if (cp != nullptr) {
    AttendContextParallel(m, w, q, gate, num_rows, batch, rows, mla_index, *cp, scale, o, ws);
    LinearForward(w.o_proj, o, num_rows, out);
    return;
  }
  auto* decode = ws.Array<kernels::cpu::MlaDecodeSequence>(static_cast<int64_t>(batch.size()));
  auto* prefill = ws.Array<kernels::cpu::MlaPrefillSequence>(static_cast<int64_t>(batch.size()));
  int64_t num_decode = 0, num_prefill = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t t = rows[s].count, first = rows[s].offset;
    if (t == 0) continue;
    const kernels::cpu::PagedLatent ctx =
        Context(batch[s], mla_index, batch[s].num_computed_tokens + t);
    const float* gate_s = gate != nullptr ? gate + first * heads * dv : nullptr;
    if (t == 1) {
      decode[num_decode++] = {ctx, q + first * heads * qk, gate_s, o + first * heads * dv};
    } else {
      prefill[num_prefill++] = {ctx, t, q + first * heads * qk, gate_s, o + first * heads * dv};
    }
  }
  const kernels::MlaDims dims{m.num_heads, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim,
                              m.kv_lora_rank};
  if (num_decode > 0) {
    const absl::Span<const kernels::cpu::MlaDecodeSequence> seqs(decode, num_decode);
    void* scratch =
        ws.Array<char>(static_cast<int64_t>(kernels::cpu::MlaDecodeScratchBytes(dims, seqs)));
    kernels::cpu::MlaDecode(dims, scale, KernelWeights(w.kv_b_proj), seqs, scratch);
  }
  if (num_prefill > 0) {
    const absl::Span<const kernels::cpu::MlaPrefillSequence> seqs(prefill, num_prefill);
    void* scratch =
        ws.Array<char>(static_cast<int64_t>(kernels::cpu::MlaPrefillScratchBytes(dims, seqs)));
    kernels::cpu::MlaPrefill(dims, scale, KernelWeights(w.kv_b_proj), seqs, scratch);
  }
  LinearForward(w.o_proj, o, num_rows, out);
}

}  // namespace strata::engine
