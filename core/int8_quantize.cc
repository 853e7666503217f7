#include "core/int8_quantize.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/check.h"
#include "core/quantize_group.h"

namespace strata {
namespace {

constexpr float kMaxCode = 127.0f;
// Adding and subtracting 1.5·2^23 rounds an f32 of magnitude < 2^22 to the nearest integer, ties
// to even, in the current rounding mode — unlike std::nearbyint, the compiler vectorises it.
constexpr float kRoundMagic = 12582912.0f;

static_assert(kInt8GroupSize == kQuantGroupSize);

}  // namespace

uint16_t Int8ScaleBits(float amax) {
  const uint32_t bits = std::bit_cast<uint32_t>(amax / kMaxCode);
  // Round up to the next bf16 (amax / 127 ≥ 0): truncate, then step up if anything was cut.
  return static_cast<uint16_t>((bits >> 16) + ((bits & 0xFFFFu) != 0));
}

bool QuantizeInt8Row(DType dtype, const void* values, int64_t cols, int8_t* codes,
                     uint16_t* scales) {
  CHECK(dtype == DType::kF32 || dtype == DType::kBF16) << DTypeName(dtype);
  CHECK_EQ(cols % kInt8GroupSize, 0) << "int8 groups need the input width to be a multiple of 32";
  const size_t group_bytes = kInt8GroupSize * DTypeSize(dtype);
  const auto* src = static_cast<const uint8_t*>(values);
  for (int64_t g = 0; g < cols / kInt8GroupSize; ++g) {
    uint32_t bits[kInt8GroupSize];
    LoadGroupBits(dtype, src + g * group_bytes, bits);
    const uint32_t amax_bits = GroupAmaxBits(bits);
    if (amax_bits >= kNonFiniteBits) return false;
    const uint16_t scale = Int8ScaleBits(std::bit_cast<float>(amax_bits));
    scales[g] = scale;
    // A division, not a reciprocal: 1/s overflows for the smallest (subnormal) scales.
    const float s = scale != 0 ? Bf16ToF32(scale) : 1.0f;  // an all-zero group divides by 1
    int8_t* out = codes + g * kInt8GroupSize;
    for (int i = 0; i < kInt8GroupSize; ++i) {
      // |v / s| ≤ 127 but for a rounding in the last place: the clamp catches that.
      const float v = std::bit_cast<float>(bits[i]);
      const float q = std::clamp((v / s + kRoundMagic) - kRoundMagic, -kMaxCode, kMaxCode);
      out[i] = static_cast<int8_t>(q);
    }
  }
  return true;
}

void DecodeInt8(const int8_t* codes, const uint16_t* scales, size_t count, float* dst) {
  CHECK_EQ(count % kInt8GroupSize, 0u);
  for (size_t g = 0; g < count / kInt8GroupSize; ++g) {
    const float s = Bf16ToF32(scales[g]);
    for (int i = 0; i < kInt8GroupSize; ++i) {
      dst[g * kInt8GroupSize + i] = static_cast<float>(codes[g * kInt8GroupSize + i]) * s;
    }
  }
}

}  // namespace strata
