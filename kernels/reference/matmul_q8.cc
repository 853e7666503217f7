#include "kernels/reference/matmul_q8.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/int8_quantize.h"

namespace strata::kernels {
namespace {

// y[i, j] for every i, j: decode_row(j, dst) writes row j of W (k values) as f32.
template <typename DecodeRow>
void MatmulQ8(const float* x, int64_t m, int64_t k, int64_t n, const DecodeRow& decode_row,
              float* y) {
  CHECK_GE(m, 0);
  CHECK_GE(n, 0);
  CHECK_EQ(k % kQ8BlockSize, 0) << "Q8 activations need whole 32-element blocks";
  const int64_t blocks = k / kQ8BlockSize;
  std::vector<int8_t> codes(static_cast<size_t>(m * k));
  std::vector<float> scales(static_cast<size_t>(m * blocks));
  for (int64_t i = 0; i < m; ++i) {
    QuantizeQ8Reference(x + i * k, k, codes.data() + i * k, scales.data() + i * blocks);
  }
  std::vector<float> w(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    decode_row(j, w.data());
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0.0;
      for (int64_t b = 0; b < blocks; ++b) {
        double block = 0.0;
        for (int64_t e = b * kQ8BlockSize; e < (b + 1) * kQ8BlockSize; ++e) {
          block += static_cast<double>(codes[static_cast<size_t>(i * k + e)]) * w[e];
        }
        sum += static_cast<double>(scales[static_cast<size_t>(i * blocks + b)]) * block;
      }
      y[i * n + j] = static_cast<float>(sum);
    }
  }
}

}  // namespace

void QuantizeQ8Reference(const float* x, int64_t k, int8_t* codes, float* scales) {
  CHECK_EQ(k % kQ8BlockSize, 0);
  for (int64_t b = 0; b < k / kQ8BlockSize; ++b) {
    const float* v = x + b * kQ8BlockSize;
    float amax = 0.0f;
    bool finite = true;
    for (int e = 0; e < kQ8BlockSize; ++e) {
      finite = finite && std::isfinite(v[e]);
      amax = std::max(amax, std::fabs(v[e]));
    }
    int8_t* q = codes + b * kQ8BlockSize;
    const float inverse = 127.0f / amax;
    if (!finite || !(inverse <= std::numeric_limits<float>::max())) {
      scales[b] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      for (int e = 0; e < kQ8BlockSize; ++e) q[e] = 0;
      continue;
    }
    scales[b] = amax / 127.0f;
    for (int e = 0; e < kQ8BlockSize; ++e) {
      const float scaled = v[e] * inverse;  // |scaled| ≤ 127 (+ an ulp): rounds into range
      q[e] = static_cast<int8_t>(std::nearbyint(scaled));
    }
  }
}

void MatmulMxfp4Q8Reference(const float* x, int64_t m, int64_t k, const uint8_t* w_packed,
                            const uint8_t* w_scales, int64_t n, float* y) {
  MatmulQ8(
      x, m, k, n,
      [&](int64_t j, float* dst) {
        DecodeMxfp4(w_packed + j * (k / 2), w_scales + j * (k / kMxfp4BlockSize),
                    static_cast<size_t>(k), dst);
      },
      y);
}

void MatmulInt8Q8Reference(const float* x, int64_t m, int64_t k, const int8_t* w_codes,
                           const uint16_t* w_scales, int64_t n, float* y) {
  MatmulQ8(
      x, m, k, n,
      [&](int64_t j, float* dst) {
        DecodeInt8(w_codes + j * k, w_scales + j * (k / kInt8GroupSize), static_cast<size_t>(k),
                   dst);
      },
      y);
}

}  // namespace strata::kernels
