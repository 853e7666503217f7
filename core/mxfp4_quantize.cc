#include "core/mxfp4_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"

namespace strata {
namespace {

constexpr float kE2M1Max = 6.0f;

// One group's values as f32: bf16 is the high half of an f32.
void LoadGroup(DType dtype, const uint8_t* src, float (&out)[kMxfp4BlockSize]) {
  if (dtype == DType::kF32) {
    std::memcpy(out, src, sizeof(out));
    return;
  }
  uint16_t raw[kMxfp4BlockSize];
  std::memcpy(raw, src, sizeof(raw));
  for (int i = 0; i < kMxfp4BlockSize; ++i) {
    const uint32_t bits = uint32_t{raw[i]} << 16;
    std::memcpy(&out[i], &bits, sizeof(float));
  }
}

}  // namespace

uint8_t Mxfp4ScaleByte(float amax) {
  if (amax == 0.0f) return 127;
  int exponent = 0;
  const double mantissa = std::frexp(static_cast<double>(amax) / kE2M1Max, &exponent);
  // amax/6 = mantissa·2^exponent, mantissa in [0.5, 1): ceil(log2) is exponent, or
  // exponent−1 when amax/6 is exactly a power of two.
  if (mantissa == 0.5) exponent -= 1;
  return static_cast<uint8_t>(std::clamp(exponent, -127, 127) + 127);
}

bool QuantizeMxfp4Row(DType dtype, const void* values, int64_t cols, uint8_t* packed,
                      uint8_t* scales) {
  CHECK(dtype == DType::kF32 || dtype == DType::kBF16) << DTypeName(dtype);
  CHECK_EQ(cols % kMxfp4BlockSize, 0) << "MXFP4 needs the input width to be a multiple of 32";
  const size_t group_bytes = kMxfp4BlockSize * DTypeSize(dtype);
  const auto* src = static_cast<const uint8_t*>(values);
  for (int64_t g = 0; g < cols / kMxfp4BlockSize; ++g) {
    float group[kMxfp4BlockSize];
    LoadGroup(dtype, src + g * group_bytes, group);
    float amax = 0.0f;
    for (float v : group) {
      if (!std::isfinite(v)) return false;
      amax = std::max(amax, std::fabs(v));
    }
    const uint8_t scale = Mxfp4ScaleByte(amax);
    scales[g] = scale;
    // 2^(127 − scale) as a float: exact (the exponent stays within [−127, 127]).
    const float inverse = std::ldexp(1.0f, 127 - int{scale});
    uint8_t* out = packed + g * (kMxfp4BlockSize / 2);
    for (int i = 0; i < kMxfp4BlockSize; i += 2) {
      out[i / 2] = static_cast<uint8_t>(NearestE2M1Code(group[i] * inverse) |
                                        NearestE2M1Code(group[i + 1] * inverse) << 4);
    }
  }
  return true;
}

Mxfp4Weights QuantizeMxfp4(const std::vector<float>& values, int64_t rows, int64_t cols) {
  CHECK_EQ(cols % kMxfp4BlockSize, 0) << "MXFP4 needs the input width to be a multiple of 32";
  CHECK_EQ(static_cast<int64_t>(values.size()), rows * cols);
  Mxfp4Weights out;
  out.packed.assign(static_cast<size_t>(rows * cols / 2), 0);
  out.scales.assign(static_cast<size_t>(rows * cols / kMxfp4BlockSize), 0);
  for (int64_t r = 0; r < rows; ++r) {
    CHECK(QuantizeMxfp4Row(DType::kF32, values.data() + r * cols, cols,
                           out.packed.data() + r * cols / 2,
                           out.scales.data() + r * cols / kMxfp4BlockSize))
        << "row " << r << " holds a value that is not finite";
  }
  return out;
}

}  // namespace strata
