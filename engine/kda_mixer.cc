#include <cmath>
#include <vector>

#include "engine/mixers.h"
#include "kernels/reference/gated_rms_norm.h"
#include "kernels/reference/kda_chunk.h"
#include "kernels/reference/kda_gate.h"
#include "kernels/reference/kda_recurrent.h"
#include "kernels/reference/l2_norm.h"
#include "kernels/reference/short_conv.h"

namespace strata::engine {
namespace {

constexpr float kL2NormEps = 1e-6f;  // FLA l2norm (MODEL.md §3.3)
constexpr int kPrefillChunkSize = 64;

}  // namespace

void KdaMixerForward(const ModelConfig& cfg, const KdaWeights& w, const float* x, int64_t num_rows,
                     ForwardBatch batch, absl::Span<const RowSpan> rows, int kda_index, float* out,
                     [[maybe_unused]] Workspace& ws) {
  const KdaConfig& k = cfg.kda;
  const int64_t p = k.projection_size(), hd = k.head_dim, heads = k.num_heads;
  const int taps = k.conv_kernel_size;
  const size_t n = static_cast<size_t>(num_rows);

  // Projections of all rows at once: each weight is read once per step.
  std::vector<float> q_raw(n * p), k_raw(n * p), v_raw(n * p);
  LinearForward(w.q_proj, x, num_rows, q_raw.data());
  LinearForward(w.k_proj, x, num_rows, k_raw.data());
  LinearForward(w.v_proj, x, num_rows, v_raw.data());
  std::vector<float> f_low(n * hd), f(n * p), beta(n * heads), gate(n * p);
  LinearForward(w.f_a_proj, x, num_rows, f_low.data());
  LinearForward(w.f_b_proj, f_low.data(), num_rows, f.data());
  LinearForward(w.b_proj, x, num_rows, beta.data());
  kernels::SigmoidReference(beta.data(), num_rows * heads, beta.data());
  if (!w.g_proj.empty()) {
    LinearForward(w.g_proj, x, num_rows, gate.data());
  } else {
    std::vector<float> g_low(n * hd);
    LinearForward(w.g_a_proj, x, num_rows, g_low.data());
    LinearForward(w.g_b_proj, g_low.data(), num_rows, gate.data());
  }
  std::vector<float> decay(n * p);
  kernels::KdaGateReference(f.data(), num_rows, k.num_heads, k.head_dim, w.a_log.data(),
                            w.dt_bias.data(), k.has_gate_lower_bound, k.gate_lower_bound,
                            decay.data());

  std::vector<float> q(n * p), kk(n * p), v(n * p), o(n * p);
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t t = rows[s].count, off = rows[s].offset * p;
    if (t == 0) continue;
    float* conv = batch[s].cache.kda_conv[static_cast<size_t>(kda_index)];
    const int64_t conv_stride = (taps - 1) * p;
    kernels::ShortConvSiluReference(q_raw.data() + off, t, p, w.q_conv.data(), taps, conv,
                                    q.data() + off);
    kernels::ShortConvSiluReference(k_raw.data() + off, t, p, w.k_conv.data(), taps,
                                    conv + conv_stride, kk.data() + off);
    kernels::ShortConvSiluReference(v_raw.data() + off, t, p, w.v_conv.data(), taps,
                                    conv + 2 * conv_stride, v.data() + off);
    // Per head over D channels: q scaled by D^-1/2 after the norm, k not (MODEL.md §9.1 #5).
    kernels::L2NormReference(q.data() + off, t * heads, hd, kL2NormEps,
                             1.0f / std::sqrt(static_cast<float>(hd)), q.data() + off);
    kernels::L2NormReference(kk.data() + off, t * heads, hd, kL2NormEps, 1.0f, kk.data() + off);
    float* state = batch[s].cache.kda_state[static_cast<size_t>(kda_index)];
    const float* b = beta.data() + rows[s].offset * heads;
    if (t == 1) {
      kernels::KdaRecurrentReference(q.data() + off, kk.data() + off, v.data() + off,
                                     decay.data() + off, b, t, k.num_heads, k.head_dim, state,
                                     o.data() + off);
    } else {
      kernels::KdaChunkReference(q.data() + off, kk.data() + off, v.data() + off,
                                 decay.data() + off, b, t, k.num_heads, k.head_dim,
                                 kPrefillChunkSize, state, o.data() + off);
    }
  }
  kernels::GatedRmsNormReference(o.data(), gate.data(), num_rows, k.num_heads, k.head_dim,
                                 w.o_norm.data(), cfg.rms_norm_eps, o.data());
  LinearForward(w.o_proj, o.data(), num_rows, out);
}

}  // namespace strata::engine
