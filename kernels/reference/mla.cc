#include "kernels/reference/mla.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace strata::kernels {
namespace {

void CheckDims(const MlaDims& m, int64_t num_ctx, int64_t num_new) {
  CHECK_GT(m.num_heads, 0);
  CHECK_GE(m.qk_nope_head_dim, 0);
  CHECK_GE(m.qk_rope_head_dim, 0);
  CHECK_GT(m.v_head_dim, 0);
  CHECK_GT(m.kv_lora_rank, 0);
  CHECK(num_new >= 0 && num_new <= num_ctx) << "num_new " << num_new << " num_ctx " << num_ctx;
}

// Row-major [rows, cols] f32 matrix times an f64 vector, f64 result: out = M · vec.
void MatVec(const float* m, int64_t rows, int64_t cols, const double* vec, double* out) {
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      acc += m[r * cols + c] * vec[c];
    }
    out[r] = acc;
  }
}

// scores[0, count) ← their softmax, in place (max-subtracted, f64).
void SoftmaxInPlace(double* scores, int64_t count) {
  const double max = *std::max_element(scores, scores + count);
  double sum = 0.0;
  for (int64_t j = 0; j < count; ++j) {
    scores[j] = std::exp(scores[j] - max);
    sum += scores[j];
  }
  for (int64_t j = 0; j < count; ++j) {
    scores[j] /= sum;
  }
}

}  // namespace

void MlaAttentionReference(const float* q, const float* latent, int64_t num_ctx, int64_t num_new,
                           const float* w_kvb, const MlaDims& dims, float scale, float* o) {
  CheckDims(dims, num_ctx, num_new);
  const int64_t dn = dims.qk_nope_head_dim, dr = dims.qk_rope_head_dim;
  const int64_t dv = dims.v_head_dim, r = dims.kv_lora_rank, heads = dims.num_heads;
  const int64_t lat_w = r + dr, q_w = dn + dr;
  const int64_t first_pos = num_ctx - num_new;
  for (int64_t h = 0; h < heads; ++h) {
    // Expand k_nope (dn) and v (dv) of every context row: [num_ctx, dn + dv] in f64.
    const float* w_h = w_kvb + h * (dn + dv) * r;
    std::vector<double> kv(static_cast<size_t>(num_ctx * (dn + dv)));
#pragma omp parallel for schedule(static) if (num_ctx * (dn + dv) * r > (1 << 16))
    for (int64_t j = 0; j < num_ctx; ++j) {
      std::vector<double> c(latent + j * lat_w, latent + j * lat_w + r);
      MatVec(w_h, dn + dv, r, c.data(), kv.data() + j * (dn + dv));
    }
#pragma omp parallel for schedule(static) if (num_new * num_ctx * (dn + dv) > (1 << 16))
    for (int64_t t = 0; t < num_new; ++t) {
      const float* qt = q + (t * heads + h) * q_w;
      const int64_t count = first_pos + t + 1;  // causal: context rows 0..position
      std::vector<double> p(static_cast<size_t>(count));
      for (int64_t j = 0; j < count; ++j) {
        const double* k_nope = kv.data() + j * (dn + dv);
        const float* k_pe = latent + j * lat_w + r;
        double dot = 0.0;
        for (int64_t c = 0; c < dn; ++c) {
          dot += qt[c] * k_nope[c];
        }
        for (int64_t c = 0; c < dr; ++c) {
          dot += static_cast<double>(qt[dn + c]) * k_pe[c];
        }
        p[j] = dot * scale;
      }
      SoftmaxInPlace(p.data(), count);
      for (int64_t c = 0; c < dv; ++c) {
        double acc = 0.0;
        for (int64_t j = 0; j < count; ++j) {
          acc += p[j] * kv[j * (dn + dv) + dn + c];
        }
        o[t * heads * dv + h * dv + c] = static_cast<float>(acc);
      }
    }
  }
}

void MlaAttentionAbsorbedReference(const float* q, const float* latent, int64_t num_ctx,
                                   int64_t num_new, const float* w_kvb, const MlaDims& dims,
                                   float scale, float* o) {
  CheckDims(dims, num_ctx, num_new);
  const int64_t dn = dims.qk_nope_head_dim, dr = dims.qk_rope_head_dim;
  const int64_t dv = dims.v_head_dim, r = dims.kv_lora_rank, heads = dims.num_heads;
  const int64_t lat_w = r + dr, q_w = dn + dr;
  const int64_t first_pos = num_ctx - num_new;
#pragma omp parallel for collapse(2) \
    schedule(static) if (num_new * heads * num_ctx * lat_w > (1 << 16))
  for (int64_t t = 0; t < num_new; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* qt = q + (t * heads + h) * q_w;
      const float* w_uk = w_kvb + h * (dn + dv) * r;  // [dn, r]
      const float* w_uv = w_uk + dn * r;              // [dv, r]
      // q̃ = [W_UKᵀ q_nope (r) ; q_pe (dr)]
      std::vector<double> q_abs(static_cast<size_t>(lat_w), 0.0);
      for (int64_t a = 0; a < dn; ++a) {
        for (int64_t c = 0; c < r; ++c) {
          q_abs[c] += static_cast<double>(w_uk[a * r + c]) * qt[a];
        }
      }
      for (int64_t c = 0; c < dr; ++c) {
        q_abs[r + c] = qt[dn + c];
      }
      const int64_t count = first_pos + t + 1;
      std::vector<double> p(static_cast<size_t>(count));
      for (int64_t j = 0; j < count; ++j) {
        double dot = 0.0;
        for (int64_t c = 0; c < lat_w; ++c) {
          dot += q_abs[c] * latent[j * lat_w + c];
        }
        p[j] = dot * scale;
      }
      SoftmaxInPlace(p.data(), count);
      std::vector<double> o_lat(static_cast<size_t>(r), 0.0);  // ō = Σ p_j c_j
      for (int64_t j = 0; j < count; ++j) {
        for (int64_t c = 0; c < r; ++c) {
          o_lat[c] += p[j] * latent[j * lat_w + c];
        }
      }
      std::vector<double> o_h(static_cast<size_t>(dv));
      MatVec(w_uv, dv, r, o_lat.data(), o_h.data());
      for (int64_t c = 0; c < dv; ++c) {
        o[t * heads * dv + h * dv + c] = static_cast<float>(o_h[c]);
      }
    }
  }
}

}  // namespace strata::kernels
