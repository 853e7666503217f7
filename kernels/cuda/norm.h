// Row-wise normalisation and activation kernels (docs/model.md §5, §6.3), f32 math:
//   RmsNorm       y = x / sqrt(mean(x²) + eps) ⊙ weight                      (weight may be null)
//   AddRmsNorm    residual += x (f32, in place); y = RmsNorm(residual); optionally x plus the
//                 routed experts' weighted sum (the MoE combine folded into the residual add);
//                 RmsNorm of the routed sum alone likewise (LatentMoE's latent_norm)
//   AttnResMix    out = Σ_i softmax_i(z)·v_i, z_i = (w_norm⊙w_proj)·v_i / sqrt(mean(v_i²)+eps);
//                 optionally also normed = RmsNorm(out) (the sublayer input), and first the
//                 partial sum's pending add (AttnResSources::pending), in the same pass
//   Glu           out = SwiGLU or SiTU-GLU(gate, up), row-strided inputs (fused gate|up GEMMs)
// One CTA (256 threads) per row; outputs f32 or bf16 bits (nearest even). Rows are
// [rows, dim] row-major unless a stride is given.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/reference/glu.h"

namespace strata::kernels::cuda {

absl::Status RmsNorm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps,
                     float* y, cudaStream_t stream);
absl::Status RmsNorm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps,
                     uint16_t* y, cudaStream_t stream);

absl::Status AddRmsNorm(float* residual, const float* x, int64_t rows, int64_t dim,
                        const float* weight, float eps, float* y, cudaStream_t stream);
absl::Status AddRmsNorm(float* residual, const float* x, int64_t rows, int64_t dim,
                        const float* weight, float eps, uint16_t* y, cudaStream_t stream);

// The routed experts' weighted sum of each row, as MoeCombine (moe.h) computes it: Σ_i
// weights[t, i] · y_perm[pair_row[t, i]] over i ascending (pair_row −1: none), rows of `dim`.
struct RoutedSum {
  const float* y_perm = nullptr;
  const int32_t* pair_row = nullptr;
  const float* weights = nullptr;
  int top_k = 0;
};

// The MoE combine folded into a norm: y = RmsNorm(routed sum) — bit for bit MoeCombine into f32
// rows followed by RmsNorm (LatentMoE's latent_norm over the routed experts' latent sum).
absl::Status RmsNorm(const RoutedSum& routed, int64_t rows, int64_t dim, const float* weight,
                     float eps, uint16_t* y, cudaStream_t stream);

// The MoE combine folded into the residual add: residual += (routed sum + x), x [rows, dim] the
// shared expert's rows or null (the sum alone); then y = RmsNorm(residual). Bit for bit
// MoeCombine(accumulate onto x) followed by AddRmsNorm, in one pass.
absl::Status AddRmsNorm(float* residual, const float* x, const RoutedSum& routed, int64_t rows,
                        int64_t dim, const float* weight, float eps, uint16_t* y,
                        cudaStream_t stream);

inline constexpr int kMaxAttnResSources = 16;

// The AttnRes sources by value (no device pointer array needed; graph-capture friendly).
struct AttnResSources {
  const float* ptr[kMaxAttnResSources] = {};  // each [rows, dim] f32 on the device
  int count = 0;
  // Optional: the running partial sum p (the last source, partial == ptr[count − 1]) takes its
  // pending update in the same pass, p = p + pending (p = pending when `replace`), written back
  // to p — the add the forward would otherwise launch before the mix, bit for bit (the same f32
  // add). pending [rows, dim] must alias neither p nor out.
  float* partial = nullptr;
  const float* pending = nullptr;
  bool replace = false;
};

// out [rows, dim] f32 must alias no source. When `normed` is non-null it receives
// RmsNorm(out; norm_weight, norm_eps).
absl::Status AttnResMix(const AttnResSources& sources, int64_t rows, int64_t dim,
                        const float* w_norm, const float* w_proj, float eps, float* out,
                        const float* norm_weight, float norm_eps, uint16_t* normed,
                        cudaStream_t stream);

// out[r, c] = GLU(gate[r·in_stride + c], up[r·in_stride + c]) for c < width; out is
// [rows, width] dense. For a fused [rows, 2·width] gate|up buffer: gate = buf,
// up = buf + width, in_stride = 2·width.
absl::Status Glu(const float* gate, const float* up, int64_t rows, int64_t width, int64_t in_stride,
                 const GluParams& params, float* out, cudaStream_t stream);
absl::Status Glu(const float* gate, const float* up, int64_t rows, int64_t width, int64_t in_stride,
                 const GluParams& params, uint16_t* out, cudaStream_t stream);

}  // namespace strata::kernels::cuda
