#include "tools/mxfp4_quantize.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/dtype.h"

namespace strata::tools {
namespace {

constexpr float kE2M1Max = 6.0f;

// The E8M0 exponent (unbiased) of one group: smallest e with kE2M1Max·2^e ≥ amax.
int GroupExponent(float amax) {
  if (amax == 0.0f) return 0;
  int exponent = 0;
  const double mantissa = std::frexp(static_cast<double>(amax) / kE2M1Max, &exponent);
  // amax/6 = mantissa·2^exponent, mantissa in [0.5, 1): ceil(log2) is exponent, or
  // exponent-1 when amax/6 is exactly a power of two.
  if (mantissa == 0.5) exponent -= 1;
  return std::clamp(exponent, -127, 127);
}

}  // namespace

uint8_t NearestE2M1Code(float scaled) {
  const float magnitude = std::fabs(scaled);
  int best = 0;
  for (int code = 1; code < 8; ++code) {
    const float best_error = std::fabs(magnitude - kE2M1Values[best]);
    const float error = std::fabs(magnitude - kE2M1Values[code]);
    // Strictly closer wins; on a tie the even code wins (best is odd only if code-1 was kept).
    if (error < best_error || (error == best_error && code % 2 == 0)) best = code;
  }
  if (best != 0 && std::signbit(scaled)) best |= 8;
  return static_cast<uint8_t>(best);
}

Mxfp4Weights QuantizeMxfp4(const std::vector<float>& values, int64_t rows, int64_t cols) {
  CHECK_EQ(cols % kMxfp4BlockSize, 0) << "MXFP4 needs the input width to be a multiple of 32";
  CHECK_EQ(static_cast<int64_t>(values.size()), rows * cols);
  Mxfp4Weights out;
  out.packed.assign(static_cast<size_t>(rows * cols / 2), 0);
  out.scales.assign(static_cast<size_t>(rows * cols / kMxfp4BlockSize), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < cols / kMxfp4BlockSize; ++g) {
      const float* group = values.data() + r * cols + g * kMxfp4BlockSize;
      float amax = 0.0f;
      for (int i = 0; i < kMxfp4BlockSize; ++i) amax = std::max(amax, std::fabs(group[i]));
      const int exponent = GroupExponent(amax);
      out.scales[static_cast<size_t>(r * (cols / kMxfp4BlockSize) + g)] =
          static_cast<uint8_t>(exponent + 127);
      for (int i = 0; i < kMxfp4BlockSize; ++i) {
        const uint8_t code = NearestE2M1Code(std::ldexp(group[i], -exponent));
        const size_t byte = static_cast<size_t>((r * cols + g * kMxfp4BlockSize + i) / 2);
        out.packed[byte] |= static_cast<uint8_t>(i % 2 == 0 ? code : code << 4);
      }
    }
  }
  return out;
}

}  // namespace strata::tools
