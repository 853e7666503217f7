// KDA mixer (docs/model.md §3): the projections of all rows at once (each weight read once per
// step), then the fused CPU kernels per sequence kind: every one-token sequence of the batch in one
// KdaDecode call, every longer run (prefill chunk) in one KdaPrefill call; then o_proj. A
// sequence saving KDA checkpoints inside the step runs as pieces split at the saves, one
// kernel round per piece, with the caches copied out between rounds.
//
// Batch invariance: which kernel a sequence takes depends only on its own token count, and
// both kernels compute each (sequence, head) on one thread in a fixed order, so a sequence's
// output does not depend on what else is in the batch.
#include "engine/mixers.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/kda_chunk.h"
#include "kernels/cpu/kda_decode.h"
#include "kernels/cpu/kda_layer.h"

namespace strata::engine {
namespace {

constexpr float kL2NormEps = 1e-6f;  // FLA l2norm (docs/model.md §3.3)

kernels::cpu::KdaLayerParams LayerParams(const ModelConfig& cfg, const KdaWeights& w) {
  const KdaConfig& k = cfg.kda;
  kernels::cpu::KdaLayerParams p;
  p.num_heads = k.num_heads;
  p.head_dim = k.head_dim;
  p.conv_kernel_size = k.conv_kernel_size;
  p.q_conv = w.q_conv.data();
  p.k_conv = w.k_conv.data();
  p.v_conv = w.v_conv.data();
  p.a_log = w.a_log.data();
  p.dt_bias = w.dt_bias.data();
  p.has_gate_lower_bound = k.has_gate_lower_bound;
  p.gate_lower_bound = k.gate_lower_bound;
  p.o_norm = w.o_norm.data();
  p.o_norm_eps = cfg.rms_norm_eps;
  p.l2_norm_eps = kL2NormEps;
  return p;
}

// Every one-token sequence through KdaDecode, every longer one through KdaPrefill (which kernel a
// sequence takes depends only on its own token count: batch invariance, and a replay of one
// kept token takes the kernel plain decoding would).
void RunKdaKernels(const kernels::cpu::KdaLayerParams& params,
                   absl::Span<const kernels::cpu::KdaSequence> seqs,
                   const kernels::cpu::KdaRows& rows, float* y, Workspace& ws) {
  WorkspaceScope scope(ws);
  const auto n = static_cast<int64_t>(seqs.size());
  auto* decode = ws.Array<kernels::cpu::KdaSequence>(n);
  auto* prefill = ws.Array<kernels::cpu::KdaSequence>(n);
  int64_t num_decode = 0, num_prefill = 0;
  for (const kernels::cpu::KdaSequence& seq : seqs) {
    if (seq.num_tokens == 1) {
      decode[num_decode++] = seq;
    } else {
      prefill[num_prefill++] = seq;
    }
  }
  kernels::cpu::KdaDecode(params, decode, num_decode, rows, y);
  kernels::cpu::KdaPrefill(params, prefill, num_prefill, rows, kernels::cpu::kKdaDefaultChunkSize,
                           y);
}

}  // namespace

void KdaMixerForward(const ModelConfig& cfg, const KdaWeights& w, const float* x, int64_t num_rows,
                     ForwardBatch batch, absl::Span<const RowSpan> rows, int kda_index,
                     KdaDraftRows* drafts, float* out, Workspace& ws) {
  const KdaConfig& k = cfg.kda;
  const int64_t p = k.projection_size(), hd = k.head_dim, heads = k.num_heads;
  WorkspaceScope scope(ws);

  float* q_raw = ws.Floats(num_rows * p);
  float* k_raw = ws.Floats(num_rows * p);
  float* v_raw = ws.Floats(num_rows * p);
  float* low_f = ws.Floats(num_rows * hd);  // f_a output
  float* low_g = ws.Floats(num_rows * hd);  // g_a output
  float* f = ws.Floats(num_rows * p);
  float* b = ws.Floats(num_rows * heads);
  float* gate = ws.Floats(num_rows * p);
  float* y = ws.Floats(num_rows * p);
  // Every projection of x in one kernel call, then the low-rank ones' second halves in another.
  const bool full_rank_gate = !w.g_proj.empty();
  const LinearProduct of_x[] = {
      {&w.q_proj, x, q_raw},
      {&w.k_proj, x, k_raw},
      {&w.v_proj, x, v_raw},
      {&w.f_a_proj, x, low_f},
      {&w.b_proj, x, b},
      full_rank_gate ? LinearProduct{&w.g_proj, x, gate} : LinearProduct{&w.g_a_proj, x, low_g}};
  LinearForwardAll(of_x, num_rows);
  const LinearProduct of_low[] = {{&w.f_b_proj, low_f, f}, {&w.g_b_proj, low_g, gate}};
  LinearForwardAll(absl::MakeConstSpan(of_low, full_rank_gate ? 1 : 2), num_rows);

  const kernels::cpu::KdaRows kda_rows{q_raw, k_raw, v_raw, f, b, gate};
  const size_t index = static_cast<size_t>(kda_index);
  const kernels::cpu::KdaLayerParams params = LayerParams(cfg, w);
  auto* seqs = ws.Array<kernels::cpu::KdaSequence>(static_cast<int64_t>(batch.size()));
  // Sequences with checkpoint saves run in pieces split at them: round r runs every sequence's
  // r-th piece, then copies the caches of those whose r-th save that piece reached.
  size_t num_rounds = 1;
  for (const ForwardSequence& seq : batch) {
    num_rounds = std::max(num_rounds, seq.kda_saves.size() + 1);
  }
  for (size_t round = 0; round < num_rounds; ++round) {
    size_t num_seqs = 0;
    for (size_t s = 0; s < batch.size(); ++s) {
      const absl::Span<const KdaCacheSave> saves = batch[s].kda_saves;
      if (rows[s].count == 0 || round > saves.size()) continue;
      const int64_t from = round == 0 ? 0 : saves[round - 1].num_tokens;
      const int64_t to = round < saves.size() ? saves[round].num_tokens : rows[s].count;
      CHECK(from <= to && to <= rows[s].count) << "checkpoint saves of sequence " << s;
      if (to == from) continue;  // a save at the end leaves an empty last piece
      kernels::cpu::KdaSequence& seq = seqs[num_seqs++];
      seq = {rows[s].offset + from, to - from, batch[s].cache.kda_state[index],
             batch[s].cache.kda_conv[index]};
      if (batch[s].kda_draft_row >= 0) {  // verifying drafts: replayed once they are judged
        CHECK(drafts != nullptr && seq.num_tokens > 1 && saves.empty())
            << "draft rows of sequence " << s;
        drafts->Save(kda_index, batch[s].kda_draft_row, kda_rows, seq.row_offset, seq.num_tokens);
        seq.update_caches = batch[s].kda_update_caches;
      }
    }
    RunKdaKernels(params, absl::MakeConstSpan(seqs, num_seqs), kda_rows, y, ws);
    for (size_t s = 0; s < batch.size(); ++s) {
      if (rows[s].count == 0 || round >= batch[s].kda_saves.size()) continue;
      const KdaCacheSave& save = batch[s].kda_saves[round];
      std::memcpy(save.kda_state[index], batch[s].cache.kda_state[index],
                  static_cast<size_t>(k.state_floats()) * sizeof(float));
      std::memcpy(save.kda_conv[index], batch[s].cache.kda_conv[index],
                  static_cast<size_t>(k.conv_floats()) * sizeof(float));
    }
  }
  LinearForward(w.o_proj, y, num_rows, out);
}

// The kept tokens through the layer's kernels, chosen by token count as in a forward (one token:
// the decode kernel), from the caches the verifying forward left unchanged; outputs discarded.
void KdaReplayLayer(const ModelConfig& cfg, const KdaWeights& w, const KdaDraftRows& drafts,
                    absl::Span<const KdaReplay> sequences, int kda_index, Workspace& ws) {
  WorkspaceScope scope(ws);
  const size_t index = static_cast<size_t>(kda_index);
  auto* seqs = ws.Array<kernels::cpu::KdaSequence>(static_cast<int64_t>(sequences.size()));
  for (size_t i = 0; i < sequences.size(); ++i) {
    const KdaReplay& r = sequences[i];
    CHECK(r.num_tokens >= 1 && r.draft_row + r.num_tokens <= drafts.num_rows());
    seqs[i] = {r.draft_row, r.num_tokens, r.cache->kda_state[index], r.cache->kda_conv[index]};
  }
  float* y = ws.Floats(drafts.num_rows() * cfg.kda.projection_size());
  RunKdaKernels(LayerParams(cfg, w), absl::MakeConstSpan(seqs, sequences.size()),
                drafts.Layer(kda_index), y, ws);
}

}  // namespace strata::engine
