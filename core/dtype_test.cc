#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(DTypeTest, NamesRoundTripAndUnknownIsRejected) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kU8, DType::kI64,
                  DType::kBool}) {
    EXPECT_EQ(DTypeFromName(DTypeName(d)), d);
  }
  EXPECT_EQ(DTypeFromName("F4"), std::nullopt);
  EXPECT_EQ(DTypeFromName("bf16"), std::nullopt);  // safetensors names are upper case
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1u);
}

TEST(DTypeTest, Bf16WidensExactlyAndNarrowsRoundingToEven) {
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0xc000), -2.0f);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1.0078125 + 2^-8 is halfway between 0x3f81 and 0x3f82: ties to even -> 0x3f82
  EXPECT_EQ(F32ToBf16(1.0078125f + std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    float f = Bf16ToF32(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToBf16(f), bits);
  }
}

TEST(DTypeTest, F16RoundTripsEveryValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    float f = F16ToF32(static_cast<uint16_t>(bits));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
      continue;
    }
    ASSERT_EQ(F32ToF16(f), bits) << "f16 bits " << bits;
  }
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00)));
}

TEST(DTypeTest, F16NarrowingMatchesCompilerFloat16) {
  // GCC's _Float16 conversion is IEEE round-to-nearest-even: an independent oracle.
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = any_bits(rng);
    // concentrate on the f16 range (exponents 100..145) half of the time
    if (i % 2) bits = (bits & 0x807fffffu) | ((100u + bits % 46u) << 23);
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    _Float16 h = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(F32ToF16(f), expected) << "f32 bits " << std::hex << bits;
  }
}

TEST(DTypeTest, F8E4M3MatchesTheFormatTable) {
  EXPECT_EQ(F8E4M3ToF32(0x38), 1.0f);
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(F8E4M3ToF32(0xfe), -448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(F8E4M3ToF32(0x3c), 1.5f);
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0xff)));
  EXPECT_FALSE(std::isinf(F8E4M3ToF32(0x78)));  // e4m3fn has no infinity: 0x78 is 256
  EXPECT_EQ(F8E4M3ToF32(0x78), 256.0f);
}

TEST(DTypeTest, F8E4M3NarrowingRoundsToNearestEvenAndSaturates) {
  for (int code = 0; code < 256; ++code) {
    float f = F8E4M3ToF32(static_cast<uint8_t>(code));
    if (std::isnan(f)) continue;
    if (code == 0x80) {  // -0 keeps its sign
      EXPECT_EQ(F32ToF8E4M3(f), 0x80);
      continue;
    }
    ASSERT_EQ(F32ToF8E4M3(f), code);
  }
  EXPECT_EQ(F32ToF8E4M3(1.0f + 0.0625f), 0x38);    // halfway 1.0 / 1.125 -> even (1.0)
  EXPECT_EQ(F32ToF8E4M3(1.125f + 0.0625f), 0x3a);  // halfway 1.125 / 1.25 -> even (1.25)
  EXPECT_EQ(F32ToF8E4M3(1.07f), 0x39);
  EXPECT_EQ(F32ToF8E4M3(1e6f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(-1e6f), 0xfe);
  EXPECT_EQ(F32ToF8E4M3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
}

TEST(DTypeTest, E8M0IsAPowerOfTwo) {
  EXPECT_EQ(E8M0ToF32(127), 1.0f);
  EXPECT_EQ(E8M0ToF32(128), 2.0f);
  EXPECT_EQ(E8M0ToF32(120), std::ldexp(1.0f, -7));
  EXPECT_EQ(E8M0ToF32(254), std::ldexp(1.0f, 127));
  EXPECT_EQ(E8M0ToF32(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(E8M0ToF32(255)));
}

TEST(DTypeTest, Mxfp4DecodesLowNibbleFirstWithOneScalePer32) {
  // 64 elements = 2 blocks. Block 0 scale 2^0, block 1 scale 2^-2.
  uint8_t packed[32];
  for (int i = 0; i < 32; ++i) {
    uint8_t low = static_cast<uint8_t>((2 * i) % 16);
    uint8_t high = static_cast<uint8_t>((2 * i + 1) % 16);
    packed[i] = static_cast<uint8_t>(low | (high << 4));
  }
  const uint8_t scales[2] = {127, 125};
  float out[64];
  DecodeMxfp4(packed, scales, 64, out);
  const float table[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6};
  for (int i = 0; i < 64; ++i) {
    float scale = i < 32 ? 1.0f : 0.25f;
    EXPECT_EQ(out[i], table[i % 16] * scale) << i;
  }
  // the sign of negative zero survives (code 8)
  EXPECT_TRUE(std::signbit(out[8]));
}

TEST(DTypeTest, ConvertToF32HandlesEveryFloatDtype) {
  const uint16_t bf16[3] = {0x3f80, 0x4000, 0xbf80};
  float out[3];
  ConvertToF32(DType::kBF16, bf16, 3, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[2], -1.0f);
  const uint16_t f16[2] = {0x3c00, 0xc000};
  ConvertToF32(DType::kF16, f16, 2, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  const double f64[2] = {0.25, -8.0};
  ConvertToF32(DType::kF64, f64, 2, out);
  EXPECT_EQ(out[0], 0.25f);
  EXPECT_EQ(out[1], -8.0f);
  const uint8_t f8[1] = {0x38};
  ConvertToF32(DType::kF8E4M3, f8, 1, out);
  EXPECT_EQ(out[0], 1.0f);
}

}  // namespace
}  // namespace strata
