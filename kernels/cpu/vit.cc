#include "kernels/cpu/vit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/mla_tiles.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu {
namespace {

constexpr int64_t kQueryTile = 128;        // query rows per scores tile: 128 × n f32 of scratch
constexpr int64_t kElementTask = 1 << 14;  // elements per task of the elementwise loops

// Runs fn(begin, end) over [0, n) in parallel tasks of kElementTask elements.
template <typename Fn>
void ForChunks(int64_t n, Fn&& fn) {
  const int64_t tasks = (n + kElementTask - 1) / kElementTask;
  ParallelFor(tasks, tasks > 1,
              [&](int64_t t) { fn(t * kElementTask, std::min(n, (t + 1) * kElementTask)); });
}

void Rotate(float* pair, float c, float s) {
  const float a = pair[0], b = pair[1];
  pair[0] = a * c - b * s;
  pair[1] = a * s + b * c;
}

// Row-wise softmax of scores [rows, n] in place (exact exp, f32 sums over f64 accumulators).
void SoftmaxRows(float* scores, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s = scores + r * n;
    const float max = *std::max_element(s, s + n);
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - max));
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  }
}

// The scalar-ISA path: per head, K and Vᵀ packed once, then each tile of query rows is two
// products on the matmul kernels with an exact softmax between them.
void VitAttentionMatmul(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
                        int num_heads, int head_dim, float scale, float* out) {
  const int64_t width = int64_t{num_heads} * head_dim;
  std::vector<float> keys(static_cast<size_t>(n * head_dim));      // K_h [n, head_dim]
  std::vector<float> values_t(static_cast<size_t>(n * head_dim));  // V_hᵀ [head_dim, n]
  std::vector<float> queries(static_cast<size_t>(std::min(n, kQueryTile) * head_dim));
  std::vector<float> scores(static_cast<size_t>(std::min(n, kQueryTile) * n));
  std::vector<float> tile_out(static_cast<size_t>(std::min(n, kQueryTile) * head_dim));
  for (int h = 0; h < num_heads; ++h) {
    const int64_t col = int64_t{h} * head_dim;
    for (int64_t j = 0; j < n; ++j) {
      for (int e = 0; e < head_dim; ++e) {
        keys[j * head_dim + e] = k[j * stride + col + e];
        values_t[e * n + j] = v[j * stride + col + e];
      }
    }
    const MatmulWeights key_w{WeightFormat::kF32, n, head_dim, keys.data(), nullptr};
    const MatmulWeights value_w{WeightFormat::kF32, head_dim, n, values_t.data(), nullptr};
    for (int64_t p0 = 0; p0 < n; p0 += kQueryTile) {
      const int64_t rows = std::min(kQueryTile, n - p0);
      for (int64_t r = 0; r < rows; ++r) {
        for (int e = 0; e < head_dim; ++e) {
          queries[r * head_dim + e] = q[(p0 + r) * stride + col + e] * scale;
        }
      }
      Matmul(key_w, queries.data(), rows, scores.data());
      ParallelFor(rows, rows > 8, [&](int64_t r) { SoftmaxRows(scores.data() + r * n, 1, n); });
      Matmul(value_w, scores.data(), rows, tile_out.data());
      for (int64_t r = 0; r < rows; ++r) {
        std::copy(tile_out.data() + r * head_dim, tile_out.data() + (r + 1) * head_dim,
                  out + (p0 + r) * width + col);
      }
    }
  }
}

// One 32-query group of head `col / head_dim` (queries [t0, t0 + 32) ∩ [0, n)) over every packed
// [k ; v] row, on the MLA lane tiles (mla_tiles.h): no mask (min_limit = n, so every row is
// below every lane's limit).
void AttendQueryGroup(const mla::TileKernels& tk, const float* q, int64_t stride, int64_t col,
                      int64_t t0, int64_t n, int head_dim, float scale, const float* kv,
                      int64_t width, float* out) {
  constexpr int L = mla::kLaneQueries;
  thread_local AlignedBuffer buffer;
  const size_t bytes = sizeof(float) * L * (2 * static_cast<size_t>(head_dim) + 3);
  if (buffer.size() < bytes) buffer = AlignedBuffer(bytes);
  float* f = buffer.as<float>();
  mla::LaneBlock lb;
  float* qt = f;
  lb.qt = qt;
  lb.acc = qt + L * head_dim;
  lb.max = lb.acc + L * head_dim;
  lb.sum = lb.max + L;
  float* limit = lb.sum + L;
  lb.limit = limit;
  lb.min_limit = n;
  const int lanes = static_cast<int>(std::min<int64_t>(L, n - t0));
  for (int lane = 0; lane < L; ++lane) {
    const float* row = q + (t0 + std::min(lane, lanes - 1)) * stride + col;
    for (int e = 0; e < head_dim; ++e) qt[e * L + lane] = lane < lanes ? row[e] : 0.0f;
    limit[lane] = 0.0f;
  }
  std::fill(lb.acc, lb.acc + int64_t{L} * head_dim, 0.0f);
  std::fill(lb.max, lb.max + L, -std::numeric_limits<float>::infinity());
  std::fill(lb.sum, lb.sum + L, 0.0f);
  const int row_w = 2 * head_dim;
  const float* rows[mla::kLaneTileRows];
  for (int64_t row0 = 0; row0 < n; row0 += mla::kLaneTileRows) {
    const int count = static_cast<int>(std::min<int64_t>(mla::kLaneTileRows, n - row0));
    for (int j = 0; j < count; ++j) rows[j] = kv + (row0 + j) * row_w;
    tk.attend_lanes(lb, rows, count, row0, head_dim, head_dim, head_dim, scale);
  }
  for (int lane = 0; lane < lanes; ++lane) {
    const float inv = 1.0f / lb.sum[lane];
    float* o = out + (t0 + lane) * width + col;
    for (int e = 0; e < head_dim; ++e) o[e] = lb.acc[e * L + lane] * inv;
  }
}

}  // namespace

Rope2dTable MakeRope2dTable(int grid_h, int grid_w, int head_dim, float theta) {
  Rope2dTable t{grid_h, grid_w, head_dim, {}, {}, {}, {}};
  const int quarter = head_dim / 4;
  auto fill = [&](int count, std::vector<float>* cos, std::vector<float>* sin) {
    cos->resize(static_cast<size_t>(count) * quarter);
    sin->resize(cos->size());
    for (int p = 0; p < count; ++p) {
      for (int i = 0; i < quarter; ++i) {
        const double angle = p * std::pow(double{theta}, -4.0 * i / head_dim);
        (*cos)[static_cast<size_t>(p) * quarter + i] = static_cast<float>(std::cos(angle));
        (*sin)[static_cast<size_t>(p) * quarter + i] = static_cast<float>(std::sin(angle));
      }
    }
  };
  fill(grid_h, &t.row_cos, &t.row_sin);
  fill(grid_w, &t.col_cos, &t.col_sin);
  return t;
}

void Rope2d(const Rope2dTable& table, float* x, int64_t stride, int num_heads) {
  const int quarter = table.head_dim / 4;
  const int64_t n = int64_t{table.grid_h} * table.grid_w;
  ParallelFor(n, n > 64, [&](int64_t p) {
    const int64_t r = p / table.grid_w, c = p % table.grid_w;
    const float* rc = table.row_cos.data() + r * quarter;
    const float* rs = table.row_sin.data() + r * quarter;
    const float* cc = table.col_cos.data() + c * quarter;
    const float* cs = table.col_sin.data() + c * quarter;
    for (int h = 0; h < num_heads; ++h) {
      float* head = x + p * stride + int64_t{h} * table.head_dim;
      for (int i = 0; i < quarter; ++i) {
        Rotate(head + 4 * i, cc[i], cs[i]);
        Rotate(head + 4 * i + 2, rc[i], rs[i]);
      }
    }
  });
}

void AddBilinearPositions(const float* table, int in_h, int in_w, int d, int out_h, int out_w,
                          float* x) {
  struct Tap {
    int lo, hi;
    float frac;
  };
  auto tap = [](int i, int in, int out) {
    const double src = std::max(0.0, (i + 0.5) * in / out - 0.5);
    const int lo = std::min(static_cast<int>(src), in - 1);
    return Tap{lo, std::min(lo + 1, in - 1), static_cast<float>(src - lo)};
  };
  const int64_t n = int64_t{out_h} * out_w;
  ParallelFor(n, n > 64, [&](int64_t p) {
    const Tap ty = tap(static_cast<int>(p / out_w), in_h, out_h);
    const Tap tx = tap(static_cast<int>(p % out_w), in_w, out_w);
    const float* a = table + (int64_t{ty.lo} * in_w + tx.lo) * d;
    const float* b = table + (int64_t{ty.lo} * in_w + tx.hi) * d;
    const float* c = table + (int64_t{ty.hi} * in_w + tx.lo) * d;
    const float* e = table + (int64_t{ty.hi} * in_w + tx.hi) * d;
    float* row = x + p * d;
    for (int i = 0; i < d; ++i) {
      const float top = a[i] * (1 - tx.frac) + b[i] * tx.frac;
      const float bottom = c[i] * (1 - tx.frac) + e[i] * tx.frac;
      row[i] += top * (1 - ty.frac) + bottom * ty.frac;
    }
  });
}

void VitAttention(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
                  int num_heads, int head_dim, float scale, float* out) {
  const Isa isa = ActiveIsa();
  if (isa == Isa::kScalar) {
    VitAttentionMatmul(q, k, v, stride, n, num_heads, head_dim, scale, out);
    return;
  }
  // Per head: K and V side by side in rows [k_j ; v_j], then every 32-query group attends all
  // of them in 32-row tiles with an online softmax (no n × n scores, no scalar exp).
  const mla::TileKernels& tk = mla::TileKernelsFor(isa);
  const int64_t width = int64_t{num_heads} * head_dim, row_w = 2 * int64_t{head_dim};
  const int64_t groups = (n + mla::kLaneQueries - 1) / mla::kLaneQueries;
  std::vector<float> kv(static_cast<size_t>(n * row_w));
  for (int h = 0; h < num_heads; ++h) {
    const int64_t col = int64_t{h} * head_dim;
    ForChunks(n, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        std::copy(k + j * stride + col, k + j * stride + col + head_dim, kv.data() + j * row_w);
        std::copy(v + j * stride + col, v + j * stride + col + head_dim,
                  kv.data() + j * row_w + head_dim);
      }
    });
    ParallelFor(groups, true, [&](int64_t g) {
      AttendQueryGroup(tk, q, stride, col, g * mla::kLaneQueries, n, head_dim, scale, kv.data(),
                       width, out);
    });
  }
}

void GeluTanh(float* x, int64_t n) {
  const float k = static_cast<float>(std::sqrt(2.0 / M_PI));
  ForChunks(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = x[i];
      x[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
    }
  });
}

void GeluErf(float* x, int64_t n) {
  const float inv_sqrt2 = static_cast<float>(1.0 / std::sqrt(2.0));
  ForChunks(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * inv_sqrt2));
  });
}

}  // namespace strata::kernels::cpu
