#include "kernels/reference/latent_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/reference/internal/test_util.h"

namespace strata::kernels {
namespace {

using testing::Rng;

std::vector<uint8_t> Encode(LatentDType dtype, const std::vector<float>& row) {
  const int32_t dim = static_cast<int32_t>(row.size());
  std::vector<uint8_t> bytes(static_cast<size_t>(LatentBytesPerToken(dtype, dim, 64)), 0xAB);
  EncodeLatentRowReference(dtype, row.data(), dim, 64, bytes.data());
  return bytes;
}

std::vector<float> Decode(LatentDType dtype, const std::vector<uint8_t>& bytes, int32_t dim) {
  std::vector<float> row(static_cast<size_t>(dim), std::nanf(""));
  DecodeLatentRowReference(dtype, bytes.data(), dim, 64, row.data());
  return row;
}

TEST(LatentRow, BytesPerTokenFollowTheLayouts) {
  EXPECT_EQ(LatentBytesPerToken(LatentDType::kF32, 576, 64), 2304);
  EXPECT_EQ(LatentBytesPerToken(LatentDType::kBF16, 576, 64), 1152);
  EXPECT_EQ(LatentBytesPerToken(LatentDType::kFP8, 576, 64), 656);  // FlashMLA's fp8 row
  EXPECT_EQ(LatentBytesPerToken(LatentDType::kFP8, 192, 64), 128 + 4 + 128);
  // Other shapes: a short last group (the demo model: 128 + 32; the tiny one: 32 + 8).
  EXPECT_EQ(LatentBytesPerToken(LatentDType::kFP8, 160, 32), 128 + 4 + 64);
  EXPECT_EQ(LatentBytesPerToken(LatentDType::kFP8, 40, 8), 32 + 4 + 16);
  EXPECT_EQ(LatentBytesPerToken(LatentDType::kFP8, 300, 64), 236 + 8 + 128);
  EXPECT_TRUE(LatentDimSupported(LatentDType::kFP8, 100, 0));
  EXPECT_FALSE(LatentDimSupported(LatentDType::kFP8, 64, 64));  // no latent part at all
  EXPECT_FALSE(LatentDimSupported(LatentDType::kF32, 0, 0));
  EXPECT_EQ(LatentDTypeFromName("fp8_ds_mla"), LatentDType::kFP8);
  EXPECT_EQ(LatentDTypeFromName("bfloat16"), LatentDType::kBF16);
  EXPECT_EQ(LatentDTypeFromName("auto"), std::nullopt);
}

TEST(LatentCodecReference, F32IsExactAndBf16RoundsEachValue) {
  Rng rng(3);
  const std::vector<float> row = rng.Normal(192, 2.0f);
  EXPECT_EQ(Decode(LatentDType::kF32, Encode(LatentDType::kF32, row), 192), row);
  const std::vector<float> bf16 = Decode(LatentDType::kBF16, Encode(LatentDType::kBF16, row), 192);
  for (size_t i = 0; i < row.size(); ++i) {
    // bf16 keeps 8 significant bits: within half an ulp, 2^-9 relative.
    EXPECT_LE(std::fabs(bf16[i] - row[i]), std::ldexp(std::fabs(row[i]), -8)) << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(bf16[i]) & 0xffffu, 0u) << i;
  }
}

// Hand-computed codes: a group whose largest magnitude is 448 has scale 1, so the codes are the
// e4m3 encodings of the values themselves (sign | exponent + 7 (4 bits) | 3 mantissa bits).
TEST(LatentCodecReference, Fp8LayoutHoldsCodesScalesAndBf16Rope) {
  std::vector<float> row(192, 0.0f);
  row[0] = 1.0f;    // 2^0 · 1.0     → 0 0111 000 = 0x38
  row[1] = -0.5f;   // −2^-1 · 1.0   → 1 0110 000 = 0xB0
  row[2] = 3.0f;    // 2^1 · 1.5     → 0 1000 100 = 0x44
  row[3] = 0.1f;    // 2^-4 · 1.6 → mantissa 4.8 rounds to 5: 0 0011 101 = 0x1D (0.1015625)
  row[4] = 448.0f;  // the largest finite value: 0 1111 110 = 0x7E
  row[5] = 0.0029296875f;  // 1.5 · 2^-9, a subnormal step and a half: ties to even → 2 (0x02)
  row[128] = 1.25f;        // the rope part: bf16, exact
  row[191] = -2.0f;
  const std::vector<uint8_t> bytes = Encode(LatentDType::kFP8, row);
  ASSERT_EQ(bytes.size(), 260u);
  EXPECT_EQ(bytes[0], 0x38);
  EXPECT_EQ(bytes[1], 0xB0);
  EXPECT_EQ(bytes[2], 0x44);
  EXPECT_EQ(bytes[3], 0x1D);
  EXPECT_EQ(bytes[4], 0x7E);
  EXPECT_EQ(bytes[5], 0x02);
  EXPECT_EQ(bytes[6], 0x00);
  float scale;
  std::memcpy(&scale, bytes.data() + 128, 4);
  EXPECT_EQ(scale, 1.0f);
  uint16_t rope0, rope63;
  std::memcpy(&rope0, bytes.data() + 132, 2);
  std::memcpy(&rope63, bytes.data() + 132 + 126, 2);
  EXPECT_EQ(rope0, 0x3FA0);   // 1.25 in bf16
  EXPECT_EQ(rope63, 0xC000);  // −2 in bf16
  const std::vector<float> back = Decode(LatentDType::kFP8, bytes, 192);
  EXPECT_EQ(back[3], 0.1015625f);
  EXPECT_EQ(back[5], 0.00390625f);  // 2 · 2^-9
  EXPECT_EQ(back[128], 1.25f);
  EXPECT_EQ(back[191], -2.0f);
}

TEST(LatentCodecReference, Fp8ErrorIsBoundedPerGroup) {
  Rng rng(11);
  for (int32_t dim : {65, 192, 300, 320, 576}) {
    std::vector<float> row = rng.Normal(static_cast<size_t>(dim), 3.0f);
    for (int i = 128; i < 256 && i < dim - 64; ++i)
      row[static_cast<size_t>(i)] = 0.0f;  // a zero group
    const std::vector<float> back = Decode(LatentDType::kFP8, Encode(LatentDType::kFP8, row), dim);
    const int32_t nope = dim - 64;
    for (int32_t g = 0; g * 128 < nope; ++g) {
      const int n = std::min(128, nope - g * 128);
      float amax = 0.0f;
      for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(row[g * 128 + i]));
      const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
      for (int i = 0; i < n; ++i) {
        const float x = row[g * 128 + i], y = back[g * 128 + i];
        // 3 mantissa bits: half an ulp is 2^-4 of the value; subnormals step 2^-9 · scale.
        const float bound = std::max(std::fabs(x) / 16.0f, std::ldexp(scale, -10)) * 1.0001f;
        EXPECT_LE(std::fabs(y - x), bound) << "dim " << dim << " group " << g << " i " << i;
      }
    }
    for (int32_t i = nope; i < dim; ++i) EXPECT_EQ(back[i], Bf16ToF32(F32ToBf16(row[i])));
  }
}

TEST(LatentCodecReference, Fp8GroupMaximumReadsBackAsItself) {
  std::vector<float> row(192, 0.25f);
  row[77] = -37.5f;  // the group maximum maps to code ±448 · scale
  const std::vector<float> back = Decode(LatentDType::kFP8, Encode(LatentDType::kFP8, row), 192);
  EXPECT_NEAR(back[77], -37.5f, 37.5f * 1e-6f);
  EXPECT_NEAR(back[0], 0.25f, 0.25f / 16.0f);
}

}  // namespace
}  // namespace strata::kernels
