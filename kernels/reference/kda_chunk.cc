#include "kernels/reference/kda_chunk.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace strata::kernels {
namespace {

// One head's inputs, f32, rows of `stride` floats starting at the head's first channel.
struct HeadInputs {
  const float* q;
  const float* k;
  const float* v;
  const float* g;
  const float* beta;  // beta[t * beta_stride]
  int64_t stride;
  int64_t beta_stride;
};

// f64 working set for one chunk of n ≤ C tokens (row r = token t0 + r), head dim d.
struct ChunkScratch {
  std::vector<double> cum_g;  // [C, d] G_r = Σ_{i≤r} g_i within the chunk (≤ 0, non-increasing)
  std::vector<double> lower;  // [C, C] L_rs = β_r Σ_c k_r k_s e^{G_r−G_s}, r > s
  std::vector<double> aqk;    // [C, C] A_rs = Σ_c q_r k_s e^{G_r−G_s}, r ≥ s
  std::vector<double> u;      // [C, d] pseudo-values V' = (I+L)⁻¹ Diag(β) (V − (Γ⊙K) S)
  std::vector<double> span;   // [d] running partial sum of g between two rows
};

void CumulativeGate(const HeadInputs& in, int64_t t0, int64_t n, int64_t d, ChunkScratch& w) {
  for (int64_t r = 0; r < n; ++r) {
    const float* gr = in.g + (t0 + r) * in.stride;
    for (int64_t c = 0; c < d; ++c) {
      const double prev = r == 0 ? 0.0 : w.cum_g[(r - 1) * d + c];
      w.cum_g[r * d + c] = prev + gr[c];
    }
  }
}

// L and Aqk from pairwise decays exp(G_r − G_s), r ≥ s. The exponent is formed directly as the
// partial sum Σ_{s<i≤r} g_i (≤ 0), walking s downwards from r, so nothing can overflow whatever
// the gate, no e^{−G} factor is ever formed, and g = −∞ (a full reset) stays well defined.
void IntraChunkMatrices(const HeadInputs& in, int64_t t0, int64_t n, int64_t d, int64_t chunk,
                        ChunkScratch& w) {
  for (int64_t r = 0; r < n; ++r) {
    const float* qr = in.q + (t0 + r) * in.stride;
    const float* kr = in.k + (t0 + r) * in.stride;
    const double beta_r = in.beta[(t0 + r) * in.beta_stride];
    std::fill(w.span.begin(), w.span.end(), 0.0);  // G_r − G_s for the current s
    for (int64_t s = r; s >= 0; --s) {
      const float* ks = in.k + (t0 + s) * in.stride;
      double dot_k = 0.0;
      double dot_q = 0.0;
      for (int64_t c = 0; c < d; ++c) {
        const double ks_decayed = static_cast<double>(ks[c]) * std::exp(w.span[c]);
        dot_k += kr[c] * ks_decayed;
        dot_q += qr[c] * ks_decayed;
      }
      w.lower[r * chunk + s] = s < r ? beta_r * dot_k : 0.0;
      w.aqk[r * chunk + s] = dot_q;
      const float* gs = in.g + (t0 + s) * in.stride;
      for (int64_t c = 0; c < d; ++c) {
        w.span[c] += gs[c];
      }
    }
  }
}

// (I + L) V' = Diag(β)(V − (Γ⊙K) S), solved by forward substitution (I + L is unit lower
// triangular). Γ_r = exp(G_r − G_0) with G_0 = 0 at the chunk start.
void SolvePseudoValues(const HeadInputs& in, int64_t t0, int64_t n, int64_t d, int64_t chunk,
                       const std::vector<double>& s_state, ChunkScratch& w) {
  for (int64_t r = 0; r < n; ++r) {
    const float* kr = in.k + (t0 + r) * in.stride;
    const float* vr = in.v + (t0 + r) * in.stride;
    const double beta_r = in.beta[(t0 + r) * in.beta_stride];
    double* ur = w.u.data() + r * d;
    for (int64_t j = 0; j < d; ++j) {
      ur[j] = vr[j];
    }
    for (int64_t c = 0; c < d; ++c) {
      const double kg = kr[c] * std::exp(w.cum_g[r * d + c]);
      for (int64_t j = 0; j < d; ++j) {
        ur[j] -= kg * s_state[c * d + j];
      }
    }
    for (int64_t j = 0; j < d; ++j) {
      ur[j] *= beta_r;
    }
    for (int64_t s = 0; s < r; ++s) {
      const double l_rs = w.lower[r * chunk + s];
      const double* us = w.u.data() + s * d;
      for (int64_t j = 0; j < d; ++j) {
        ur[j] -= l_rs * us[j];
      }
    }
  }
}

// O_r = (q_r ⊙ Γ_r)ᵀ S + Σ_{s≤r} A_rs V'_s.
void ChunkOutput(const HeadInputs& in, int64_t t0, int64_t n, int64_t d, int64_t chunk,
                 const std::vector<double>& s_state, const ChunkScratch& w, float* o) {
  std::vector<double> out(static_cast<size_t>(d));
  for (int64_t r = 0; r < n; ++r) {
    const float* qr = in.q + (t0 + r) * in.stride;
    std::fill(out.begin(), out.end(), 0.0);
    for (int64_t c = 0; c < d; ++c) {
      const double qg = qr[c] * std::exp(w.cum_g[r * d + c]);
      for (int64_t j = 0; j < d; ++j) {
        out[j] += qg * s_state[c * d + j];
      }
    }
    for (int64_t s = 0; s <= r; ++s) {
      const double a_rs = w.aqk[r * chunk + s];
      const double* us = w.u.data() + s * d;
      for (int64_t j = 0; j < d; ++j) {
        out[j] += a_rs * us[j];
      }
    }
    float* orow = o + (t0 + r) * in.stride;
    for (int64_t j = 0; j < d; ++j) {
      orow[j] = static_cast<float>(out[j]);
    }
  }
}

// S ← Diag(Γ_last) S + Σ_s (k_s ⊙ exp(G_last − G_s)) V'_sᵀ, the exponent again a partial sum.
void ChunkStateUpdate(const HeadInputs& in, int64_t t0, int64_t n, int64_t d, ChunkScratch& w,
                      std::vector<double>& s_state) {
  const double* g_last = w.cum_g.data() + (n - 1) * d;
  for (int64_t c = 0; c < d; ++c) {
    const double decay = std::exp(g_last[c]);
    for (int64_t j = 0; j < d; ++j) {
      s_state[c * d + j] *= decay;
    }
  }
  std::fill(w.span.begin(), w.span.end(), 0.0);  // G_last − G_s for the current s
  for (int64_t s = n - 1; s >= 0; --s) {
    const float* ks = in.k + (t0 + s) * in.stride;
    const double* us = w.u.data() + s * d;
    for (int64_t c = 0; c < d; ++c) {
      const double kd = ks[c] * std::exp(w.span[c]);
      for (int64_t j = 0; j < d; ++j) {
        s_state[c * d + j] += kd * us[j];
      }
    }
    const float* gs = in.g + (t0 + s) * in.stride;
    for (int64_t c = 0; c < d; ++c) {
      w.span[c] += gs[c];
    }
  }
}

}  // namespace

void KdaChunkReference(const float* q, const float* k, const float* v, const float* g,
                       const float* beta, int64_t num_tokens, int num_heads, int head_dim,
                       int chunk_size, float* state, float* o) {
  CHECK_GE(num_tokens, 0);
  CHECK_GT(num_heads, 0);
  CHECK_GT(head_dim, 0);
  CHECK_GT(chunk_size, 0);
  const int64_t d = head_dim;
  const int64_t chunk = chunk_size;
  const int64_t width = num_heads * d;
#pragma omp parallel for schedule(static) if (num_heads > 1 && num_tokens * d * d > (1 << 14))
  for (int h = 0; h < num_heads; ++h) {
    const int64_t off = h * d;
    const HeadInputs in{q + off, k + off, v + off, g + off, beta + h, width, num_heads};
    float* state_h = state + h * d * d;
    std::vector<double> s_state(state_h, state_h + d * d);  // S[i][j], f64 for the whole call
    ChunkScratch w{std::vector<double>(chunk * d), std::vector<double>(chunk * chunk),
                   std::vector<double>(chunk * chunk), std::vector<double>(chunk * d),
                   std::vector<double>(d)};
    for (int64_t t0 = 0; t0 < num_tokens; t0 += chunk) {
      const int64_t n = std::min(chunk, num_tokens - t0);
      CumulativeGate(in, t0, n, d, w);
      IntraChunkMatrices(in, t0, n, d, chunk, w);
      SolvePseudoValues(in, t0, n, d, chunk, s_state, w);
      ChunkOutput(in, t0, n, d, chunk, s_state, w, o + off);
      ChunkStateUpdate(in, t0, n, d, w, s_state);
    }
    for (int64_t p = 0; p < d * d; ++p) {
      state_h[p] = static_cast<float>(s_state[p]);
    }
  }
}

}  // namespace strata::kernels
