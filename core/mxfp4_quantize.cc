#include "core/mxfp4_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/quantize_group.h"

namespace strata {
namespace {

static_assert(kMxfp4BlockSize == kQuantGroupSize);

constexpr float kE2M1Max = 6.0f;

// The codes of one group at scale 2^(127 − inverse's exponent) (inverse = 1 / scale), and their
// squared error in units of that scale.
float GroupCodes(const uint32_t (&bits)[kMxfp4BlockSize], float inverse,
                 uint8_t (&codes)[kMxfp4BlockSize]) {
  float miss2[kMxfp4BlockSize];
  for (int i = 0; i < kMxfp4BlockSize; ++i) {
    float magnitude;
    const uint32_t abs_bits = bits[i] & 0x7FFFFFFFu;
    std::memcpy(&magnitude, &abs_bits, sizeof(magnitude));
    const float m = magnitude * inverse;
    const uint8_t code = NearestE2M1Code(m);  // in [0, 7]
    // kE2M1Values[code] from the same midpoint tests (a table read would not vectorise).
    const float value =
        0.5f * static_cast<float>((m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f)) +
        static_cast<float>((m > 2.5f) + (m >= 3.5f)) + 2.0f * static_cast<float>(m > 5.0f);
    miss2[i] = (m - value) * (m - value);
    const uint8_t negative = static_cast<uint8_t>(bits[i] >> 31) & (code != 0);
    codes[i] = static_cast<uint8_t>(code | negative << 3);
  }
  for (int width = kMxfp4BlockSize / 2; width > 0; width /= 2) {  // a fixed summation tree
    for (int i = 0; i < width; ++i) miss2[i] += miss2[i + width];
  }
  return miss2[0];
}

// 2^(127 − scale) as a float: exact (the exponent stays within [−127, 127]).
float InverseScale(uint8_t scale) { return std::ldexp(1.0f, 127 - int{scale}); }

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
  // Written for the compiler to vectorise (bit operations and compares, no branches per
  // value): ~8x the per-value loop it replaces.
  for (int64_t g = 0; g < cols / kMxfp4BlockSize; ++g) {
    uint32_t bits[kMxfp4BlockSize];
    LoadGroupBits(dtype, src + g * group_bytes, bits);
    const uint32_t amax_bits = GroupAmaxBits(bits);
    if (amax_bits >= kNonFiniteBits) return false;
    float amax;
    std::memcpy(&amax, &amax_bits, sizeof(amax));
    uint8_t scale = Mxfp4ScaleByte(amax);
    uint8_t codes[kMxfp4BlockSize];
    const float error = GroupCodes(bits, InverseScale(scale), codes);
    if (error > 0.0f && scale > 0) {
      // Half the scale: the largest values saturate at ±6, the others get twice the
      // resolution. Its units are half as large, so its squared error counts a quarter.
      uint8_t finer[kMxfp4BlockSize];
      if (GroupCodes(bits, InverseScale(scale - 1), finer) < 4.0f * error) {
        scale -= 1;
        std::memcpy(codes, finer, sizeof(codes));
      }
    }
    scales[g] = scale;
    uint8_t* out = packed + g * (kMxfp4BlockSize / 2);
    for (int i = 0; i < kMxfp4BlockSize / 2; ++i) {
      out[i] = static_cast<uint8_t>(codes[2 * i] | codes[2 * i + 1] << 4);
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
