#include "kernels/reference/vit.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace strata::kernels::reference {
namespace {

// The source coordinate of output index i (PyTorch's area-free bilinear, align_corners false).
struct Tap {
  int lo, hi;
  double frac;  // weight of `hi`
};
Tap SourceTap(int i, int in, int out) {
  const double src = std::max(0.0, (i + 0.5) * in / out - 0.5);
  const int lo = std::min(static_cast<int>(src), in - 1);
  return {lo, std::min(lo + 1, in - 1), src - lo};
}

}  // namespace

void AddBilinearPositions(const float* table, int in_h, int in_w, int d, int out_h, int out_w,
                          float* x) {
  for (int r = 0; r < out_h; ++r) {
    const Tap ty = SourceTap(r, in_h, out_h);
    for (int c = 0; c < out_w; ++c) {
      const Tap tx = SourceTap(c, in_w, out_w);
      float* row = x + (int64_t{r} * out_w + c) * d;
      auto at = [&](int y, int xx, int e) {
        return double{table[(int64_t{y} * in_w + xx) * d + e]};
      };
      for (int e = 0; e < d; ++e) {
        const double top = at(ty.lo, tx.lo, e) * (1 - tx.frac) + at(ty.lo, tx.hi, e) * tx.frac;
        const double bottom = at(ty.hi, tx.lo, e) * (1 - tx.frac) + at(ty.hi, tx.hi, e) * tx.frac;
        row[e] = static_cast<float>(row[e] + top * (1 - ty.frac) + bottom * ty.frac);
      }
    }
  }
}

void Rope2d(float* x, int64_t stride, int grid_h, int grid_w, int num_heads, int head_dim,
            float theta) {
  auto rotate = [](float* pair, double angle) {
    const double a = pair[0], b = pair[1];
    pair[0] = static_cast<float>(a * std::cos(angle) - b * std::sin(angle));
    pair[1] = static_cast<float>(a * std::sin(angle) + b * std::cos(angle));
  };
  for (int r = 0; r < grid_h; ++r) {
    for (int c = 0; c < grid_w; ++c) {
      float* row = x + (int64_t{r} * grid_w + c) * stride;
      for (int h = 0; h < num_heads; ++h) {
        float* head = row + int64_t{h} * head_dim;
        for (int i = 0; i < head_dim / 4; ++i) {
          const double f = std::pow(double{theta}, -4.0 * i / head_dim);
          rotate(head + 4 * i, c * f);
          rotate(head + 4 * i + 2, r * f);
        }
      }
    }
  }
}

void VitAttention(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
                  int num_heads, int head_dim, float scale, float* out) {
  std::vector<double> s(static_cast<size_t>(n));
  const int64_t width = int64_t{num_heads} * head_dim;
  for (int h = 0; h < num_heads; ++h) {
    const int64_t col = int64_t{h} * head_dim;
    for (int64_t p = 0; p < n; ++p) {
      double max = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int e = 0; e < head_dim; ++e)
          dot += double{q[p * stride + col + e]} * k[j * stride + col + e];
        s[j] = dot * scale;
        max = std::max(max, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - max));
      for (int e = 0; e < head_dim; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += s[j] * v[j * stride + col + e];
        out[p * width + col + e] = static_cast<float>(acc / sum);
      }
    }
  }
}

void MergePatches2x2(const float* x, int grid_h, int grid_w, int d, float* merged) {
  for (int i = 0; i < grid_h / 2; ++i) {
    for (int j = 0; j < grid_w / 2; ++j) {
      float* m = merged + (int64_t{i} * (grid_w / 2) + j) * 4 * d;
      const int sources[4][2] = {
          {2 * i, 2 * j}, {2 * i, 2 * j + 1}, {2 * i + 1, 2 * j}, {2 * i + 1, 2 * j + 1}};
      for (int s = 0; s < 4; ++s) {
        const float* src = x + (int64_t{sources[s][0]} * grid_w + sources[s][1]) * d;
        std::copy(src, src + d, m + int64_t{s} * d);
      }
    }
  }
}

void GeluTanh(float* x, int64_t n) {
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(0.5 * v * (1 + std::tanh(k * (v + 0.044715 * v * v * v))));
  }
}

void GeluErf(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
  }
}

}  // namespace strata::kernels::reference
