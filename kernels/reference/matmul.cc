#include "kernels/reference/matmul.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/int8_quantize.h"
#include "kernels/reference/internal/scalar_math.h"

namespace strata::kernels {
namespace {

// Weight rows are decoded to f32 one tile at a time (≈ 128 KiB, so the tile stays in L2 while
// every activation row streams past it); output tiles of columns are spread over OpenMP threads.
constexpr int64_t kTileFloats = int64_t{1} << 15;
constexpr int64_t kMaxTileRows = 256;

// y[m, n] = x[m, k] · Wᵀ where decode_rows(j0, j1, dst) writes rows [j0, j1) of W as f32 into
// dst ([j1 − j0, k]). Every y element is one internal::DotF64 (f64, fixed order), so the result
// does not depend on the tiling, the thread count or m.
template <typename DecodeRows>
void TiledMatmul(const float* x, int64_t m, int64_t k, int64_t n, const DecodeRows& decode_rows,
                 float* y) {
  CHECK_GE(m, 0);
  CHECK_GE(k, 0);
  CHECK_GE(n, 0);
  if (m == 0 || n == 0) {
    return;
  }
  const int64_t tile_rows =
      std::clamp<int64_t>(kTileFloats / std::max<int64_t>(k, 1), 4, kMaxTileRows);
  const int64_t num_tiles = (n + tile_rows - 1) / tile_rows;
#pragma omp parallel if (m * n * k > (1 << 16))
  {
    std::vector<float> tile(static_cast<size_t>(tile_rows * k));
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < num_tiles; ++t) {
      const int64_t j0 = t * tile_rows;
      const int64_t j1 = std::min(n, j0 + tile_rows);
      decode_rows(j0, j1, tile.data());
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * k;
        float* yi = y + i * n;
        int64_t j = j0;
        for (; j + 4 <= j1; j += 4) {
          const float* w4[4];
          for (int c = 0; c < 4; ++c) {
            w4[c] = tile.data() + (j - j0 + c) * k;
          }
          double out[4];
          internal::DotF64x4(xi, w4, k, out);
          for (int c = 0; c < 4; ++c) {
            yi[j + c] = static_cast<float>(out[c]);
          }
        }
        for (; j < j1; ++j) {
          yi[j] = static_cast<float>(internal::DotF64(xi, tile.data() + (j - j0) * k, k));
        }
      }
    }
  }
}

}  // namespace

void MatmulReference(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) {
  TiledMatmul(
      x, m, k, n,
      [&](int64_t j0, int64_t j1, float* dst) { std::copy(w + j0 * k, w + j1 * k, dst); }, y);
}

void MatmulBf16Reference(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                         float* y) {
  TiledMatmul(
      x, m, k, n,
      [&](int64_t j0, int64_t j1, float* dst) {
        const uint16_t* src = w + j0 * k;
        const int64_t count = (j1 - j0) * k;
        for (int64_t p = 0; p < count; ++p) {
          dst[p] = Bf16ToF32(src[p]);
        }
      },
      y);
}

void MatmulMxfp4Reference(const float* x, int64_t m, int64_t k, const uint8_t* w_packed,
                          const uint8_t* w_scales, int64_t n, float* y) {
  CHECK_EQ(k % kMxfp4BlockSize, 0) << "MXFP4 rows must hold whole 32-element blocks";
  const int64_t packed_row = k / 2;
  const int64_t scales_row = k / kMxfp4BlockSize;
  TiledMatmul(
      x, m, k, n,
      [&](int64_t j0, int64_t j1, float* dst) {
        for (int64_t j = j0; j < j1; ++j) {
          DecodeMxfp4(w_packed + j * packed_row, w_scales + j * scales_row, static_cast<size_t>(k),
                      dst + (j - j0) * k);
        }
      },
      y);
}

void MatmulInt8Reference(const float* x, int64_t m, int64_t k, const int8_t* w_codes,
                         const uint16_t* w_scales, int64_t n, float* y) {
  CHECK_EQ(k % kInt8GroupSize, 0) << "int8 rows must hold whole 32-element groups";
  const int64_t scales_row = k / kInt8GroupSize;
  TiledMatmul(
      x, m, k, n,
      [&](int64_t j0, int64_t j1, float* dst) {
        for (int64_t j = j0; j < j1; ++j) {
          DecodeInt8(w_codes + j * k, w_scales + j * scales_row, static_cast<size_t>(k),
                     dst + (j - j0) * k);
        }
      },
      y);
}

}  // namespace strata::kernels
