#include "kernels/cpu/mla_context_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/latent_codec.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One query row's heads over the rows it sees: online softmax per head, each latent row decoded
// once for all heads.
void AttendRow(int heads, int latent_dim, int rank, float scale, const PagedLatent& local,
               int64_t visible, const float* q, float* partial, float* kappa, float* m, float* l) {
  const int64_t row_bytes = local.RowBytes(latent_dim);
  std::fill(m, m + heads, kNegInf);
  std::fill(l, l + heads, 0.0f);
  for (int h = 0; h < heads; ++h) std::fill_n(partial + h * (rank + 1), rank, 0.0f);
  for (int64_t j = 0; j < visible; ++j) {
    const std::byte* src = local.RowAt(j, row_bytes);
    const float* row = reinterpret_cast<const float*>(src);
    if (local.dtype != LatentDType::kF32) {
      DecodeLatentRow(local.dtype, src, latent_dim, local.rope_dim, kappa);
      row = kappa;
    }
    for (int h = 0; h < heads; ++h) {
      const float* qh = q + static_cast<int64_t>(h) * latent_dim;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int k = 0; k < latent_dim; ++k) s += qh[k] * row[k];
      s *= scale;
      float* acc = partial + h * (rank + 1);
      if (s > m[h]) {  // rescale what was summed so far
        const float factor = std::exp(m[h] - s);
        l[h] *= factor;
#pragma omp simd
        for (int k = 0; k < rank; ++k) acc[k] *= factor;
        m[h] = s;
      }
      const float p = std::exp(s - m[h]);
      l[h] += p;
#pragma omp simd
      for (int k = 0; k < rank; ++k) acc[k] += p * row[k];
    }
  }
  for (int h = 0; h < heads; ++h) {
    float* acc = partial + h * (rank + 1);
    if (l[h] > 0.0f) {
      const float inv = 1.0f / l[h];
      for (int k = 0; k < rank; ++k) acc[k] *= inv;
      acc[rank] = m[h] + std::log(l[h]);
    } else {
      acc[rank] = kNegInf;
    }
  }
}

}  // namespace

int64_t LocalRows(int64_t num_positions, int64_t stride, int64_t offset) {
  return num_positions > offset ? (num_positions - offset + stride - 1) / stride : 0;
}

void MlaPartialAttention(int heads, int latent_dim, int rank, float scale, int64_t stride,
                         int64_t offset, absl::Span<const MlaPartialSequence> seqs) {
  // One task per query row, found by walking the (few) sequences: nothing is allocated on this
  // per-layer path; a row's softmax state lives on its task's stack.
  constexpr int kMaxLatent = 1024, kMaxHeads = 512;
  CHECK(latent_dim <= kMaxLatent && heads <= kMaxHeads) << latent_dim << " " << heads;
  int64_t num_rows = 0;
  for (const MlaPartialSequence& seq : seqs) num_rows += seq.num_rows;
  ParallelFor(num_rows, num_rows > 1, [&](int64_t t) {
    size_t s = 0;
    while (t >= seqs[s].num_rows) t -= seqs[s++].num_rows;
    const MlaPartialSequence& seq = seqs[s];
    const int64_t i = t;
    // Positions 0 .. first_position + i are visible (causal); this rank's are every stride-th.
    const int64_t visible = LocalRows(seq.first_position + i + 1, stride, offset);
    float kappa[kMaxLatent], m[kMaxHeads], l[kMaxHeads];
    AttendRow(heads, latent_dim, rank, scale, seq.local, visible, seq.q + i * heads * latent_dim,
              seq.partial + i * heads * (rank + 1), kappa, m, l);
  });
}

void MlaMergePartials(const float* partials, int parts, int64_t num_items, int rank, float* out) {
  ParallelFor(num_items, num_items > 64, [&](int64_t i) {
    float top = kNegInf;
    for (int p = 0; p < parts; ++p)
      top = std::max(top, partials[(p * num_items + i) * (rank + 1) + rank]);
    float* o = out + i * rank;
    std::fill_n(o, rank, 0.0f);
    if (top == kNegInf) return;  // no part saw a row (cannot happen: a token sees itself)
    float total = 0.0f;
    for (int p = 0; p < parts; ++p) {
      const float* part = partials + (p * num_items + i) * (rank + 1);
      if (part[rank] == kNegInf) continue;
      const float w = std::exp(part[rank] - top);
      total += w;
#pragma omp simd
      for (int k = 0; k < rank; ++k) o[k] += w * part[k];
    }
    const float inv = 1.0f / total;
    for (int k = 0; k < rank; ++k) o[k] *= inv;
  });
}

}  // namespace strata::kernels::cpu
