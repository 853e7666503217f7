#include "engine/media/bicubic_resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE4_1__)
#include <smmintrin.h>
#endif

#include "core/check.h"

namespace strata::media {
namespace {

constexpr double kBicubicA = -0.5;
constexpr double kBicubicSupport = 2.0;  // input pixels on each side at scale 1
constexpr int kWeightBits = 22;          // fixed-point weights: 32 − 8 − 2 bits, as Pillow

// Keys' cubic convolution kernel with a = −0.5, in the operation order Pillow evaluates it (this
// file is built with -ffp-contract=off so no FMA changes a weight's last bit).
double BicubicKernel(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((kBicubicA + 2.0) * x - (kBicubicA + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * kBicubicA;
  return 0.0;
}

// One pass's taps: output pixel i reads input pixels first[i] .. first[i] + count[i] − 1 with
// weights[i · max_taps + k] (fixed point, 2^22 = 1).
struct ResampleTaps {
  int max_taps = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;
};

int32_t ToFixedPoint(double weight) {
  const double scaled = weight * (1 << kWeightBits);
  return static_cast<int32_t>(weight < 0 ? scaled - 0.5 : scaled + 0.5);
}

ResampleTaps ComputeTaps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = kBicubicSupport * filter_scale;
  ResampleTaps taps;
  taps.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  taps.weights.assign(static_cast<size_t>(out_size) * taps.max_taps, 0);
  const double inverse_filter_scale = 1.0 / filter_scale;  // multiplied, as Pillow does
  std::vector<double> weights(taps.max_taps);
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    const int first = std::max(static_cast<int>(center - support + 0.5), 0);
    const int last = std::min(static_cast<int>(center + support + 0.5), in_size);
    const int count = last - first;
    CHECK_LE(count, taps.max_taps);
    double sum = 0.0;
    for (int k = 0; k < count; ++k) {
      weights[k] = BicubicKernel((k + first - center + 0.5) * inverse_filter_scale);
      sum += weights[k];
    }
    int64_t abs_sum = 0;
    for (int k = 0; k < count; ++k) {
      const double normalised = sum != 0.0 ? weights[k] / sum : weights[k];
      const int32_t fixed = ToFixedPoint(normalised);
      taps.weights[static_cast<size_t>(i) * taps.max_taps + k] = fixed;
      abs_sum += fixed < 0 ? -int64_t{fixed} : fixed;
    }
    // The passes sum in int32 (as Pillow): 255 · Σ|w| + 1/2 must fit (Σ|w| is about 1.1 for
    // this kernel; the check makes that a proven bound rather than an assumption).
    CHECK_LT(255 * abs_sum + (int64_t{1} << (kWeightBits - 1)), int64_t{1} << 31);
    taps.first[i] = first;
    taps.count[i] = count;
  }
  return taps;
}

uint8_t RoundFixedPoint(int32_t sum) {
  return static_cast<uint8_t>(std::clamp<int32_t>(sum >> kWeightBits, 0, 255));
}

constexpr int32_t kRoundingHalf = int32_t{1} << (kWeightBits - 1);

// One output pixel of the horizontal pass: 4 channels summed as one vector of int32 lanes
// (3-channel rows are widened to 4 first so this is the only inner loop).
inline void ResamplePixel4(const uint8_t* src, const int32_t* weights, int count, uint8_t* out) {
#if defined(__SSE4_1__)
  __m128i sums = _mm_set1_epi32(kRoundingHalf);
  for (int k = 0; k < count; ++k) {
    int32_t pixel;
    std::memcpy(&pixel, src + k * 4, 4);
    const __m128i lanes = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(pixel));
    sums = _mm_add_epi32(sums, _mm_mullo_epi32(lanes, _mm_set1_epi32(weights[k])));
  }
  // >> 22, then saturate to 16 and to 8 bits: clamp(sum >> 22, 0, 255) per lane.
  const __m128i shifted = _mm_srai_epi32(sums, kWeightBits);
  const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(shifted, shifted), _mm_setzero_si128());
  const int32_t packed = _mm_cvtsi128_si32(bytes);
  std::memcpy(out, &packed, 4);
#else
  int32_t sums[4] = {kRoundingHalf, kRoundingHalf, kRoundingHalf, kRoundingHalf};
  for (int k = 0; k < count; ++k) {
    for (int c = 0; c < 4; ++c) sums[c] += src[k * 4 + c] * weights[k];
  }
  for (int c = 0; c < 4; ++c) out[c] = RoundFixedPoint(sums[c]);
#endif
}

// Horizontal pass over rows of `channels`-channel pixels (1, 3 or 4): `width` → `new_width`.
void ResizeRowsInto(const uint8_t* pixels, uint8_t* out, int width, int height, int channels,
                    int new_width, const ResampleTaps& taps) {
  std::vector<uint8_t> wide_row(static_cast<size_t>(width) * 4);
  uint8_t wide_out[4];
  for (int y = 0; y < height; ++y) {
    const uint8_t* in_row = pixels + static_cast<size_t>(y) * width * channels;
    uint8_t* out_row = out + static_cast<size_t>(y) * new_width * channels;
    const uint8_t* row = in_row;
    if (channels == 3) {
      for (int x = 0; x < width; ++x) std::memcpy(&wide_row[x * 4], &in_row[x * 3], 3);
      row = wide_row.data();
    } else if (channels == 1) {
      for (int x = 0; x < width; ++x) wide_row[x * 4] = in_row[x];
      row = wide_row.data();
    }
    for (int x = 0; x < new_width; ++x) {
      const int32_t* weights = &taps.weights[static_cast<size_t>(x) * taps.max_taps];
      uint8_t* dst = channels == 4 ? &out_row[x * 4] : wide_out;
      ResamplePixel4(row + static_cast<size_t>(taps.first[x]) * 4, weights, taps.count[x], dst);
      if (channels != 4) std::copy(wide_out, wide_out + channels, &out_row[x * channels]);
    }
  }
}

std::vector<uint8_t> ResizeRows(const std::vector<uint8_t>& pixels, int width, int height,
                                int channels, int new_width) {
  std::vector<uint8_t> out(static_cast<size_t>(new_width) * height * channels);
  ResizeRowsInto(pixels.data(), out.data(), width, height, channels, new_width,
                 ComputeTaps(width, new_width));
  return out;
}

// Vertical pass: each column of `height` pixels → `new_height` pixels, accumulated a whole row
// at a time (row-major reads; the integer sums equal Pillow's column-by-column ones).
std::vector<uint8_t> ResizeColumns(const std::vector<uint8_t>& pixels, int width, int height,
                                   int channels, int new_height) {
  const ResampleTaps taps = ComputeTaps(height, new_height);
  const size_t row_size = static_cast<size_t>(width) * channels;
  std::vector<uint8_t> out(row_size * new_height);
  std::vector<int32_t> sums(row_size);
  for (int y = 0; y < new_height; ++y) {
    std::fill(sums.begin(), sums.end(), kRoundingHalf);
    const int32_t* weights = &taps.weights[static_cast<size_t>(y) * taps.max_taps];
    for (int k = 0; k < taps.count[y]; ++k) {
      const uint8_t* in_row = &pixels[static_cast<size_t>(taps.first[y] + k) * row_size];
      const int32_t weight = weights[k];
      for (size_t j = 0; j < row_size; ++j) sums[j] += in_row[j] * weight;
    }
    uint8_t* out_row = &out[static_cast<size_t>(y) * row_size];
    for (size_t j = 0; j < row_size; ++j) out_row[j] = RoundFixedPoint(sums[j]);
  }
  return out;
}

// round(c · a / 255) in integers, as Pillow's MULDIV255.
uint8_t MulDiv255(int c, int a) {
  const int t = c * a + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

void Premultiply(std::vector<uint8_t>& rgba) {
  for (size_t i = 0; i < rgba.size(); i += 4) {
    for (int c = 0; c < 3; ++c) rgba[i + c] = MulDiv255(rgba[i + c], rgba[i + 3]);
  }
}

void Unpremultiply(std::vector<uint8_t>& rgba) {
  for (size_t i = 0; i < rgba.size(); i += 4) {
    const int alpha = rgba[i + 3];
    if (alpha == 0 || alpha == 255) continue;
    for (int c = 0; c < 3; ++c) {
      rgba[i + c] = static_cast<uint8_t>(std::min(255 * rgba[i + c] / alpha, 255));
    }
  }
}

}  // namespace

std::vector<uint8_t> ResizeBicubic(const std::vector<uint8_t>& pixels, int width, int height,
                                   int channels, int new_width, int new_height) {
  CHECK(width >= 1 && height >= 1 && new_width >= 1 && new_height >= 1);
  CHECK(channels == 1 || channels == 3 || channels == 4) << channels;
  CHECK_EQ(pixels.size(), static_cast<size_t>(width) * height * channels);
  if (new_width == width) {
    if (new_height == height) return pixels;
    return ResizeColumns(pixels, width, height, channels, new_height);
  }
  std::vector<uint8_t> rows = ResizeRows(pixels, width, height, channels, new_width);
  if (new_height == height) return rows;
  return ResizeColumns(rows, new_width, height, channels, new_height);
}

std::vector<uint8_t> ResizeBicubicStraightAlpha(const std::vector<uint8_t>& rgba, int width,
                                                int height, int new_width, int new_height) {
  std::vector<uint8_t> premultiplied = rgba;
  Premultiply(premultiplied);
  std::vector<uint8_t> out = ResizeBicubic(premultiplied, width, height, 4, new_width, new_height);
  Unpremultiply(out);
  return out;
}

}  // namespace strata::media
